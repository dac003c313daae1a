"""Identifier hygiene: names the IR never gives a value, a local or a parameter.

Kernels are printed in several languages (C99, OpenCL C, CUDA C++) and their headers are
included from C++, so an identifier must be valid, and clash with nothing, in all of them.
This is the one module outside aotc/codegen that lists those languages' words."""
from __future__ import annotations

import re

_MATH_NAMES = """exp exp2 expm1 log log2 log10 log1p sqrt cbrt pow hypot sin cos tan asin acos atan atan2
sinh cosh tanh asinh acosh atanh erf erfc tgamma lgamma floor ceil rint round trunc nearbyint fmod
remainder fabs fmax fmin fma fdim copysign nan frexp ldexp modf scalbn logb ilogb nextafter lrint
llrint lround llround isnan isinf isfinite signbit fpclassify mad clamp mix sign select""".split()
# Identifiers the IR never gives a value, a local or a parameter, because some language it is
# printed in reserves them: keywords of C, C++ (headers are included from C++; CUDA is C++) and
# OpenCL C, its types and qualifiers, macros and functions the generated code calls, and the
# runtime's own aotc_ prefix (checked separately).
RESERVED = frozenset("""auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch typedef
union unsigned void volatile while _Bool _Complex _Imaginary bool true false asm class new delete this
template typename namespace operator private protected public virtual friend mutable explicit using
throw try catch nullptr constexpr decltype noexcept static_assert thread_local alignas alignof
char16_t char32_t wchar_t export and or not xor bitand bitor compl and_eq or_eq xor_eq not_eq
NULL NAN INFINITY HUGE_VAL HUGE_VALF EOF errno FILE stdin stdout stderr size_t ptrdiff_t
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t
INT64_C UINT64_C abs labs malloc calloc realloc free abort exit memcpy memset memcmp fopen fclose
fread fwrite fgetc printf fprintf main half uchar ushort uint ulong kernel global local constant
__kernel __global __local __constant __private barrier get_global_id get_local_id get_group_id
threadIdx blockIdx blockDim gridDim __syncthreads __shared__ __device__ __global__ warpSize""".split()
                     + _MATH_NAMES + [m + "f" for m in _MATH_NAMES] + [m + "l" for m in _MATH_NAMES])


def c_ident(name: str, limit: int = 48) -> str:
    """An identifier made from `name`, at most `limit` characters, valid in every language the
    kernels are printed in and clashing with no name the generated code uses (ir.RESERVED)."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", name).strip("_")
    s = re.sub(r"_+", "_", s)
    if len(s) > limit:
        s = s[-limit:].lstrip("_")
    if not s or s[0].isdigit() or s in RESERVED or s.lower().startswith("aotc_"):
        s = "v_" + s
    return s
