"""aotc's own vocabulary in the graph IR, listed once: the node kinds it writes (op types of the
default domain named `aotc.*`) and the node attributes it uses as messages between stages
(names starting with `_`, which ONNX attributes never do, so that evaluating a node with the
ONNX reference implementation leaves them out: ops/reference.py; NARROW_ATTR is the one
without: a QuantizeLinear carrying it folds in numpy, ops/quant.py, never through the reference).

Every module that writes or reads one of these imports its name from here
(tests/test_layering.py keeps it so: a string literal of this kind anywhere else fails it).

Node kinds that compile (each is an entry of the op registry, in the module named):
    COPY          `aotc.Copy`: y = x, an elementwise op (ops/elementwise.py): a graph output
                  that has to be a value of its own (passes/simplify.py materialize_outputs)
    ROUND_FLOAT   `aotc.RoundFloat`: a float32 rounded to a narrow float type (ops/narrow.py)
    WRAP_INT      `aotc.WrapInt`: a value wrapped to a 4- or 2-bit integer type (ops/narrow.py)
    CONV_INTEGER  `aotc.ConvInteger`: a quantized convolution as an integer Gemm (ops/quant.py,
                  written by passes/decompose.py)
    WINOGRAD_CONV `aotc.WinogradConv`: a 3 x 3 convolution by Winograd's transforms
                  (ops/winograd.py, written by passes/winograd.py)
    CHANNELS_LAST_CONV `aotc.ChannelsLastConv`: a depthwise or 1x1 convolution whose input and/or
                  output is channels-last, (N, H, W, C) (ops/channels_last.py, written by
                  passes/layout.py; attributes Conv's, and x_last / y_last)
    COUNT         `aotc.Count`: a run-time row count computed from others (ops/data_dependent.py,
                  written by passes/bounded.py)
    CONCAT_ROWS   `aotc.ConcatRows`: a Concat along a run-time sized axis (same)
    CARRY         `aotc.Carry`: copies a host loop's state into its storage (ops/control.py,
                  written by passes/control.py host_loop; attributes `loop`, `end`, `state`)
    MATMUL_NBITS  `aotc.MatMulNBits`: a product with block-quantized weights read packed,
                  unpacked in its inner loop (ops/nbits.py, written by frontend/contrib_nbits.py
                  for ONNX Runtime's MatMulNBits; attributes K, N, bits, block_size, and
                  int8_activations: 1 where ONNX Runtime quantizes the activations to int8
                  blocks, at accuracy_level 4; inputs A, B, scales, zero points, and where
                  passes/caches.py adds it the scales x zero points; NBITS_TILES: B, the
                  scales and those relaid by tiles)
    GATHER_NBITS  `aotc.GatherBlockQuantized`: rows of a block-quantized table read packed,
                  dequantized as they are gathered (same modules, for ONNX Runtime's
                  GatherBlockQuantized in its uint8 form; attributes bits, block_size)
    QUANTIZED_LSTM `aotc.DynamicQuantizeLSTM`: ONNX Runtime's DynamicQuantizeLSTM, its 8-bit
                  weights already [D, in, 4H] (so marked PACKED_ATTR), lowered with the LSTM
                  (ops/rnn.py; written by frontend/contrib_quant.py): inputs the LSTM's eight,
                  then W_scale, W_zero_point, R_scale, R_zero_point
    BRANCH_FAIL   `aotc.BranchFail`: stands for the outputs of a run-time If's branch that
                  cannot be shaped at the compiled sizes; run, it stops with AOTC_ERR_BRANCH
                  (ops/control.py, written by passes/control.py; attributes `types`, `reason`, `if`)
    SIZE_VALUES   `aotc.SizeValues`: an int64 tensor of sizes computed from run-time dimensions
                  (a Shape of them that an op reads as data), attribute SIZES_ATTR
                  (ops/constants.py, written by passes/symbolic.py)
    ASSUME_SIZES  `aotc.AssumeSizes`: its input, with the run-time dimensions its attribute
                  `sizes` ((symbol name, size), ...) names fixed at those sizes: how a branch
                  specialized to one size reads its outer inputs, under the If on the run's size
                  that chose it (ops/constants.py, written by passes/control.py
                  specialize_branch; the If carries SPECIALIZED_ATTR)

Node kinds of shape inference's work list only (passes/control.py; never in a finished graph):
    IF_MERGE      both branches of a run-time If are inferred: make its outputs
    LOOP_STEP     the previous iteration of an unrolled Loop is inferred: add the next
    LOOP_CLOSE    a host loop's body is inferred: close the loop

Attributes:
    OPSET_ATTR       on the ai.onnx nodes aotc's own rewrites write (frontend/emit.py): the opset
                     whose forms the node is in, whatever the model imports (read by validation
                     and by passes/normalize.py, which drops it)
    NARROW_ATTR      on a QuantizeLinear to a narrow type (frontend/narrow.py): that type's ONNX
                     code (ops/quant.py), since its zero point's type is widened at import
    SCOPE_ATTR       on a node holding subgraphs, inlined from a subgraph: the renaming of the
                     enclosing branch's values, through which its own subgraphs resolve the
                     names they read (passes/control.py)
    BRANCH_ATTR      on a Where that chooses a run-time If's output: its second input is needed
                     only when the condition holds, its third only when not (passes/branches.py)
    PACKED_ATTR      on an LSTM / GRU / RNN whose constant weights passes/recurrent.py
                     transposed at compile time (ops/rnn.py reads them so)
    PLAIN_SOFTMAX    on an Attention made from a MatMul-Softmax-MatMul chain: a fully masked row
                     gives Softmax's own result, NaN (passes/attention.py, ops/attention.py)
    MASK_FILL        on such an Attention: a bool mask selects this fill value instead of adding
                     -inf (same)
    COUNT_ATTR       on a node whose output has a run-time size: the name of its int64[1] count
                     output (passes/bounded.py, ops/data_dependent.py)
    DERIVED_COUNTS   on a node some of whose outputs' counts are computed from others: (name,
                     counts, parameters) of each aotc.Count to insert after it (passes/bounded.py)
    RUN_TIME_CONCAT  on a Concat along a run-time sized axis: each input's count, "" for a static
                     one (passes/bounded.py; it becomes aotc.ConcatRows)
    RUN_TIME_AXES    on an Expand to a shape with run-time entries: which output axes take which
                     count (passes/bounded.py)
    COERCE_2D        on a Softmax, LogSoftmax or Hardmax of opset < 13: it works over the input
                     flattened to 2-D at `axis` (passes/normalize.py, ops/reduce.py)
    SIZES_ATTR       on an aotc.SizeValues: its values, ints and run-time Dims (ir/dims.py)
    IN_PLACE         ((output position, input position), ...): on a node that may write each
                     of those outputs over the caller's array of that input, a cache that it
                     alone reads and whose update is a graph output: a TensorScatter's (the same
                     shape; ops/state.py) or an Attention's past key and value (the present one
                     run longer and read by no other node: the array is then laid out at the
                     output's largest shape; ops/attention.py). The kernel copies the cache only where the two arrays
                     differ, then writes the new positions (passes/caches.py)
    ONE_ARRAY        on a node with IN_PLACE, on a GPU target: its caches' inputs are always
                     their outputs' device arrays (the host copies a caller's two arrays
                     between layouts: codegen/host.py CacheCopies), so the kernel neither
                     tests nor copies
    NBITS_KERNEL     on an aotc.MatMulNBits with int8_activations, on a target whose runtime
                     has the product (`[gemm] nbits_kernel`): it calls runtime/aotc_nbits.h
                     rather than running the same arithmetic as kernel loops (passes/caches.py
                     runtime_kernels, ops/nbits.py)
    NBITS_TILES      on such an aotc.MatMulNBits in an AVX-512 build: its weights (2, 4 or 8
                     bits), scales and scales x zero points are constants relaid by tiles of 16
                     columns, the order runtime/aotc_nbits.h's VNNI product reads
                     (passes/caches.py)
    LERP_ROWS        on a Resize, on a CPU target: a linear Resize's gathering axis may call
                     runtime/aotc_lerp.h rather than kernel loops (passes/caches.py
                     runtime_kernels, ops/resize.py)
    SOFTMAX_ROWS     on a Softmax or an Attention, on an AVX-512 target: its float32 rows'
                     softmax may call runtime/aotc_softmax.h (masked 16-lane vectors) rather
                     than kernel loops (passes/caches.py runtime_kernels, ops/reduce.py
                     softmax_row)
"""
from __future__ import annotations

from .graph import Node

# node kinds that compile
COPY = "aotc.Copy"
ROUND_FLOAT = "aotc.RoundFloat"
WRAP_INT = "aotc.WrapInt"
CONV_INTEGER = "aotc.ConvInteger"
WINOGRAD_CONV = "aotc.WinogradConv"
CHANNELS_LAST_CONV = "aotc.ChannelsLastConv"
COUNT = "aotc.Count"
CONCAT_ROWS = "aotc.ConcatRows"
CARRY = "aotc.Carry"
MATMUL_NBITS = "aotc.MatMulNBits"
GATHER_NBITS = "aotc.GatherBlockQuantized"
QUANTIZED_LSTM = "aotc.DynamicQuantizeLSTM"
BRANCH_FAIL = "aotc.BranchFail"
SIZE_VALUES = "aotc.SizeValues"
ASSUME_SIZES = "aotc.AssumeSizes"
SPECIALIZED_ATTR = "aotc_specialized"   # an If that specialize_branch made (passes/control.py)

# node kinds of shape inference's work list
IF_MERGE = "aotc.IfMerge"
LOOP_STEP = "aotc.LoopStep"
LOOP_CLOSE = "aotc.LoopClose"

# attributes
OPSET_ATTR = "_aotc_opset"
NARROW_ATTR = "aotc_narrow"
SCOPE_ATTR = "_aotc_scope"
BRANCH_ATTR = "_aotc_branch"
PACKED_ATTR = "_weights_transposed"
PLAIN_SOFTMAX = "_plain_softmax"
MASK_FILL = "_mask_fill"
COUNT_ATTR = "_count"
DERIVED_COUNTS = "_derived_counts"
RUN_TIME_CONCAT = "_run_time_concat"
RUN_TIME_AXES = "_run_time_axes"
SIZES_ATTR = "_sizes"
COERCE_2D = "_coerce_2d"
IN_PLACE = "_in_place"
ONE_ARRAY = "_one_array"
NBITS_KERNEL = "_nbits_kernel"
NBITS_TILES = "_nbits_tiles"
LERP_ROWS = "_lerp_rows"
SOFTMAX_ROWS = "_softmax_rows"


def is_carry(n: Node, end: bool) -> bool:
    """Is `n` the Carry that starts a host loop (end False) or the one that ends it?"""
    return n.op_type == CARRY and bool(n.attrs.get("end")) == end
