/* Checks aotc_sgemm_pack_im2col (runtime/aotc_gemm_packed.h) against the definition of the
 * im2col matrix, value by value, in B's NR-column panels and in the MR-row panels of an A
 * that is the matrix transposed, on thousands of random convolution geometries (kernel sizes,
 * strides, dilations, asymmetric and over-wide padding, long kernels that need the taps planned
 * again, outputs wider than a column block), each input an exactly sized heap block so that
 * AddressSanitizer sees any read past it. Built by tests/test_im2col_packing.py with the
 * micro-tile of a target (-DAOTC_GEMM_*), with and without AVX-512. Exit status 0: all equal. */
#define _POSIX_C_SOURCE 200809L       /* as the generated C: the thread pool's clock */
#include <stdio.h>
#include <stdlib.h>

#include "aotc_gemm_packed.h"

static int check_width(int64_t width, int C, int H, int W, int KH, int KW, int SH, int SW, int DH, int DW, int PT, int PL, int PB, int PR)
{
    const int OH = (H + PT + PB - DH * (KH - 1) - 1) / SH + 1, OW = (W + PL + PR - DW * (KW - 1) - 1) / SW + 1;
    const int64_t K = (int64_t)C * KH * KW, N = (int64_t)OH * OW, kstep = aotc_sgemm_kstep(K);
    aotc_im2col v;
    int64_t jc, pc, k, j, wrong = 0;
    float *x;
    if (OH < 1 || OW < 1)
        return 0;
    x = malloc(sizeof(float) * (size_t)C * H * W);
    for (j = 0; j < (int64_t)C * H * W; ++j)
        x[j] = (float)(j + 1);
    v.x = x;
    v.H = H; v.W = W; v.KH = KH; v.KW = KW; v.SH = SH; v.SW = SW; v.DH = DH; v.DW = DW;
    v.PH = PT; v.PW = PL; v.OH = OH; v.OW = OW;
    for (jc = 0; jc < N; jc += AOTC_GEMM_NC)
        for (pc = 0; pc < K; pc += kstep) {
            const int64_t kc = aotc_gemm_min(kstep, K - pc), nc = aotc_gemm_min(AOTC_GEMM_NC, N - jc);
            const int64_t panels = (nc + width - 1) / width;
            float *Bp = malloc(sizeof(float) * (size_t)(kc * panels * width));
            aotc_sgemm_pack_im2col(&v, pc, kc, jc, nc, width, Bp);
            for (k = 0; k < kc; ++k)
                for (j = 0; j < panels * width; ++j) {
                    const int64_t row = pc + k, col = jc + j;
                    const int64_t c = row / (KH * KW), kh = row / KW % KH, kw = row % KW;
                    const int64_t ih = col / OW * SH - PT + kh * DH, iw = col % OW * SW - PL + kw * DW;
                    const float want = j < nc && ih >= 0 && ih < H && iw >= 0 && iw < W ? x[(c * H + ih) * W + iw] : 0.0f;
                    wrong += Bp[(j / width) * kc * width + k * width + j % width] != want;
                }
            free(Bp);
        }
    free(x);
    if (wrong)
        printf("%ld wrong (panels of %ld): C=%d H=%d W=%d kernel %dx%d strides %dx%d dilations %dx%d pads %d,%d,%d,%d\n",
               (long)wrong, (long)width, C, H, W, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR);
    return wrong != 0;
}

/* both panel widths: B's (NR) and A's (MR) */
static int check(int C, int H, int W, int KH, int KW, int SH, int SW, int DH, int DW, int PT, int PL, int PB, int PR)
{
    return check_width(AOTC_GEMM_NR, C, H, W, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR) |
           check_width(AOTC_GEMM_MR, C, H, W, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR);
}

int main(void)
{
    int t, failed = 0, cases = 0;
    srand(12345);
    for (t = 0; t < 3000; ++t, ++cases)
        failed += check(1 + rand() % 12, 1 + rand() % 20, 1 + rand() % 70, 1 + rand() % 5, 1 + rand() % 7,
                        1 + rand() % 3, 1 + rand() % 3, 1 + rand() % 2, 1 + rand() % 3,
                        rand() % 4, rand() % 5, rand() % 4, rand() % 5);
    failed += check(64, 56, 56, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);        /* ResNet-50's 3x3 */
    failed += check(3, 224, 224, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3);       /* its stem: N over a column block */
    failed += check(2, 1, 400, 1, 64, 1, 1, 1, 1, 0, 10, 0, 10);      /* a 64-tap 1-D kernel */
    failed += check(1, 3, 3000, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1);        /* 3000-wide rows */
    failed += check(3, 20, 41, 9, 9, 2, 2, 1, 1, 4, 4, 3, 4);         /* 81 taps: planned in two parts */
    failed += check(2, 1, 300, 1, 130, 1, 2, 1, 1, 0, 9, 0, 3);       /* 130 taps: in three */
    /* patches side by side (stride = kernel, no padding: aotc_pack_patches) */
    failed += check(3, 224, 224, 16, 16, 16, 16, 1, 1, 0, 0, 0, 0);   /* ViT's patch embedding */
    failed += check(3, 70, 43, 14, 14, 14, 14, 1, 1, 0, 0, 0, 0);     /* 14-wide patches, input past the last */
    failed += check(9, 21, 35, 7, 7, 7, 7, 1, 1, 0, 0, 0, 0);         /* K blocks starting inside a patch row */
    failed += check(5, 37, 41, 4, 4, 4, 4, 1, 1, 0, 0, 0, 0);         /* Swin's 4 x 4 */
    failed += check(4, 6, 150, 2, 3, 2, 3, 1, 1, 0, 0, 0, 0);         /* 2 x 3 patches */
    failed += check(2, 1, 700, 1, 20, 1, 20, 1, 1, 0, 0, 0, 0);       /* 1-D, 20 wide: two loads a row */
    failed += check(1, 64, 2100, 32, 32, 32, 32, 1, 1, 0, 0, 0, 0);   /* N over a column block */
    failed += check(4, 10, 21, 4, 4, 4, 4, 1, 1, 0, 0, 2, 3);         /* end padding: the last patches part zeros */
    cases += 14;
    printf("%d geometries, %d with wrong values\n", cases, failed);
    return failed != 0;
}
