"""A fixed subset of ONNX node test cases that pass today (see docs/CONFORMANCE.md, `make conformance`),
run through the conformance runner: one or two per op family, so a regression in any of them shows here."""
from functools import lru_cache

import pytest

from tools.conformance import collect, run_cases

CASES = [
    "test_abs", "test_add", "test_and2d", "test_attention_3d_causal", "test_attention_4d_gqa_with_past_and_present",
    "test_attention_causal_boolmask_nan_robustness", "test_attention_local_window_ext_cache_rank3_head_mask",
    "test_attention_4d_with_qk_matmul_softcap", "test_argmax_default_axis_random", "test_averagepool_1d_default",
    "test_batchnorm_epsilon", "test_bitshift_left_int16", "test_cast_DOUBLE_to_FLOAT", "test_ceil", "test_clip",
    "test_concat_1d_axis_0", "test_constant", "test_basic_conv_with_padding", "test_conv_with_strides_padding",
    "test_convtranspose", "test_cos", "test_div", "test_elu", "test_equal", "test_erf", "test_exp",
    "test_flatten_axis0", "test_gather_0", "test_gather_elements_0", "test_gathernd_example_float32",
    "test_gelu_default_1", "test_gemm_all_attributes", "test_gemm_default_no_bias", "test_globalaveragepool",
    "test_gru_batchwise", "test_greater", "test_hardswish", "test_hardmax_axis_0", "test_identity",
    "test_instancenorm_epsilon", "test_isnan", "test_layer_normalization_2d_axis0", "test_leakyrelu",
    "test_less", "test_log", "test_logsoftmax_axis_0", "test_lstm_batchwise", "test_matmul_2d",
    "test_max_float32", "test_maxpool_1d_default", "test_mean_one_input", "test_mod_broadcast", "test_mul",
    "test_neg", "test_nllloss_NCd1d2d3_sum_weight_high_ii", "test_prelu_broadcast", "test_pow", "test_reciprocal",
    "test_reduce_max_default_axes_keepdims_random", "test_rnn_seq_length", "test_relu",
    "test_rotary_embedding_with_interleaved_rotary_dim",
    "test_scatter_elements_with_axis", "test_scatternd", "test_sce_mean_weight_log_prob", "test_shape",
    "test_sigmoid", "test_softmax_axis_0",
    "test_split_1d_uneven_split_opset18", "test_sqrt", "test_sub", "test_sum_one_input", "test_tanh",
    "test_transpose_all_permutations_0", "test_tril", "test_where_example", "test_xor2d",
]


@lru_cache(maxsize=1)
def _cases() -> dict:
    return {c.name: c for c in collect() if c.name in set(CASES)}


def test_subset_names_exist():
    missing = sorted(set(CASES) - set(_cases()))
    assert not missing, f"no such ONNX node test case: {missing}"


@pytest.mark.parametrize("name", CASES)
def test_node_case_passes(name):
    case = _cases()[name]
    (res,) = run_cases([case], jobs=1, timeout=60)
    assert res.status == "PASS", f"{name}: {res.status} {res.reason}"
