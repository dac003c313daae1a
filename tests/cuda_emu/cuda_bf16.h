/* CPU emulation of the bfloat16 type the cuda printer uses (storage of bfloat16 values,
 * converted at every load and store): the bits of a float32's upper half, narrowed to nearest
 * even as the device's __float2bfloat16 does, a NaN becoming the canonical NaN as it does. */
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t x;
};

inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    __nv_bfloat16 b;
    b.x = f != f ? (uint16_t)0x7fffu : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}

inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
