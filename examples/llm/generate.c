/* Greedy generation with a decoder compiled by aotc: a prompt of token ids, then one token per
 * step, each the argmax of the last position's logits, the cache fed back each step.
 *
 * It works with any decoder artifact of the forms aotc.generate (Python) knows, finding its
 * ports by name through the header's port functions: input_ids, attention_mask, position_ids,
 * write_indices (where a step's keys and values go) and nonpad_kv_seqlen (how many the cache
 * holds after it) where the model has them, and every cache input with the output that feeds
 * it next: past_key_values.* (or past.*) with present.*, or X with updated_X (onnxruntime's
 * mobius builder's static cache). A cache of fixed length (onnxruntime-genai's shared
 * max-length buffer, mobius's static cache) starts as zeros; one whose length is a run-time
 * dimension (Hugging Face exports with past_key_values) starts empty and grows. A cache the
 * header says the run updates in place (<name>_output_in_place) is one array of the present's
 * largest shape, passed as both (a growing one then laid out at that shape's strides, as the
 * header says); any other has two of that size, past and present, that swap roles after every
 * step. Nothing is copied here. On a GPU target the in-place caches stay on the device for the
 * whole generation (<name>_keep_caches): only the logits cross to the host each step.
 *
 * Build against an artifact compiled with --name llm (another name: -DMODEL=name
 * -DMODEL_HEADER='"name.h"'):
 *
 *     aotc compile model.onnx -o out --name llm --dim sequence_length=1..128 ...
 *     cc -std=c99 -O2 -Iout examples/llm/generate.c -Lout -lllm -Wl,-rpath,$PWD/out -o generate
 *     ./generate [-w out/llm.weights] [-n STEPS] ID ID ...
 *
 * It prints the generated ids on one line, then the prefill's time and the decoding speed. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MODEL
#define MODEL llm
#define MODEL_HEADER "llm.h"
#endif
#include MODEL_HEADER

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(MODEL, name)          /* FN(create): llm_create */

#define MAX_RANK 8
#define MAX_CACHES 256

typedef struct {
    int input, output;                     /* the past input, the present output that feeds it */
    int rank, axis;                        /* axis: the run-time length's (-1: a fixed buffer) */
    int64_t shape[MAX_RANK];               /* the shape of the past the next step reads */
    float *past, *present;
} cache;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what, int status)
{
    fprintf(stderr, "generate: %s: %s\n", what, FN(strerror)(status));
    return 1;
}

static int64_t elements(const int64_t *shape, int rank)
{
    int64_t n = 1;
    for (int a = 0; a < rank; ++a)
        n *= shape[a];
    return n;
}

int main(int argc, char **argv)
{
    const char *weights = NULL;
    int steps = 16, n_prompt = 0;
    int64_t *prompt = calloc((size_t)argc, sizeof(int64_t));
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-w") == 0 && i + 1 < argc)
            weights = argv[++i];
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else
            prompt[n_prompt++] = strtoll(argv[i], NULL, 10);
    }
    if (n_prompt == 0 || steps < 1) {
        fprintf(stderr, "usage: %s [-w WEIGHTS] [-n STEPS] ID ID ...\n", argv[0]);
        return 2;
    }

    /* the ports */
    int ids = FN(input_index)("input_ids"), mask = FN(input_index)("attention_mask");
    int positions = FN(input_index)("position_ids"), logits = FN(output_index)("logits");
    int writes = FN(input_index)("write_indices"), filled = FN(input_index)("nonpad_kv_seqlen");
    if (ids < 0 || logits < 0 || strcmp(FN(output_type)(logits), "float32") != 0) {
        fprintf(stderr, "generate: the model needs an input input_ids and a float32 output logits\n");
        return 2;
    }
    const int int_ports[] = {ids, mask, positions, writes, filled};
    for (int k = 0; k < 5; ++k)
        if (int_ports[k] >= 0 && strcmp(FN(input_type)(int_ports[k]), "int64") != 0) {
            fprintf(stderr, "generate: input %s is %s; this app feeds int64\n", FN(input_name)(int_ports[k]),
                    FN(input_type)(int_ports[k]));
            return 2;
        }
    int64_t lo[MAX_RANK], hi[MAX_RANK];
    FN(input_shape)(ids, lo, hi);
    const int64_t longest = hi[1];         /* the most tokens a run takes */
    int64_t vocab[MAX_RANK];
    FN(output_shape)(logits, NULL, vocab);
    const int64_t vocabulary = vocab[2];
    static cache caches[MAX_CACHES];
    int n_caches = 0;
    for (int i = 0; FN(input_name)(i); ++i) {
        const char *name = FN(input_name)(i);
        char present[512];
        snprintf(present, sizeof present, "updated_%s", name);
        if (FN(output_index)(present) >= 0)
            ;                              /* X, updated_X */
        else if (strncmp(name, "past_key_values", 15) == 0)
            snprintf(present, sizeof present, "present%s", name + 15);
        else if (strncmp(name, "past", 4) == 0)
            snprintf(present, sizeof present, "present%s", name + 4);
        else
            continue;
        cache *c = &caches[n_caches++];
        c->input = i;
        c->output = FN(output_index)(present);
        if (c->output < 0 || n_caches == MAX_CACHES) {
            fprintf(stderr, "generate: cache input %s has no output %s\n", name, present);
            return 2;
        }
        c->rank = FN(input_shape)(i, lo, hi);
        c->axis = -1;
        for (int a = 1; a < c->rank; ++a)
            if (lo[a] != hi[a])
                c->axis = a;
        memcpy(c->shape, hi, sizeof hi);
        c->shape[0] = 1;                   /* one sequence */
        if (c->axis >= 0)
            c->shape[c->axis] = 0;         /* a past that grows starts empty */
        /* (a present at most one run longer than the past) */
        int64_t most[MAX_RANK];
        FN(output_shape)(c->output, NULL, most);
        size_t bytes = (size_t)elements(most, c->rank) * sizeof(float);
        c->past = calloc(1, bytes);
        /* the run writes only the new positions into the one array it updates in place */
        c->present = FN(output_in_place)(c->output) == i ? c->past : calloc(1, bytes);
        if (!c->past || !c->present)
            return fail("allocating the caches", AOTC_ERR_OUT_OF_MEMORY);
    }

    FN(model) *model;
    int status = FN(create)(weights, &model);
    if (status != AOTC_OK)
        return fail("create", status);
    int64_t *mask_ones = malloc((size_t)longest * sizeof(int64_t)), *pos = malloc((size_t)longest * sizeof(int64_t));
    int64_t *generated = malloc((size_t)steps * sizeof(int64_t));
    float *out_logits = malloc((size_t)(longest * vocabulary) * sizeof(float));
    if (!mask_ones || !pos || !generated || !out_logits)
        return fail("allocating", AOTC_ERR_OUT_OF_MEMORY);
    for (int64_t k = 0; k < longest; ++k)
        mask_ones[k] = 1;

    status = FN(keep_caches)(model, 1);    /* (on CPU targets the arrays are the caches already) */
    if (status != AOTC_OK)
        return fail("keep_caches", status);
    int64_t done = 0;                      /* tokens the cache holds */
    const int64_t *feed = prompt;
    int64_t n_feed = n_prompt;
    double prefill = 0.0, start = now();
    for (int step = 0; step < steps; ++step) {
        if (done + n_feed > longest) {
            fprintf(stderr, "generate: %lld tokens: the artifact takes at most %lld\n",
                    (long long)(done + n_feed), (long long)longest);
            return 1;
        }
        FN(inputs) in;
        FN(outputs) out;
        memset(&in, 0, sizeof in);
        memset(&out, 0, sizeof out);
        const int64_t seq_shape[2] = {1, n_feed}, total_shape[2] = {1, done + n_feed};
        FN(set_input)(&in, ids, feed, seq_shape);
        if (mask >= 0)
            FN(set_input)(&in, mask, mask_ones, total_shape);
        if (positions >= 0) {
            for (int64_t k = 0; k < n_feed; ++k)
                pos[k] = done + k;
            FN(set_input)(&in, positions, pos, seq_shape);
        }
        const int64_t one[1] = {1}, at = done, after = done + n_feed;
        if (writes >= 0)
            FN(set_input)(&in, writes, &at, one);
        if (filled >= 0)
            FN(set_input)(&in, filled, &after, one);
        FN(set_output)(&out, logits, out_logits);
        for (int k = 0; k < n_caches; ++k) {
            FN(set_input)(&in, caches[k].input, caches[k].past, caches[k].shape);
            FN(set_output)(&out, caches[k].output, caches[k].present);
        }
        status = FN(invoke)(model, &in, &out);
        if (status != AOTC_OK) {
            const char *why = FN(failure)(model);
            fprintf(stderr, "generate: invoke: %s%s%s\n", FN(strerror)(status), why ? ": " : "", why ? why : "");
            return 1;
        }
        for (int k = 0; k < n_caches; ++k) {   /* this step's present is the next step's past */
            cache *c = &caches[k];
            float *t = c->past;
            c->past = c->present;
            c->present = t;
            memcpy(c->shape, FN(output_dims)(&out, c->output), (size_t)c->rank * sizeof(int64_t));
        }
        const float *row = out_logits + (n_feed - 1) * vocabulary;
        int64_t best = 0;
        for (int64_t v = 1; v < vocabulary; ++v)
            if (row[v] > row[best])
                best = v;
        generated[step] = best;
        printf("%s%lld", step ? " " : "", (long long)best);
        done += n_feed;
        feed = &generated[step];
        n_feed = 1;
        if (step == 0)
            prefill = now() - start;
    }
    double decode = now() - start - prefill;
    status = FN(keep_caches)(model, 0);    /* the caches back in their arrays */
    if (status != AOTC_OK)
        return fail("keep_caches", status);
    printf("\nprefill: %d tokens in %.3f ms; decode: %d tokens in %.3f ms, %.1f tokens/s\n", n_prompt,
           1e3 * prefill, steps - 1, 1e3 * decode, decode > 0 ? (steps - 1) / decode : 0.0);
    FN(destroy)(model);
    for (int k = 0; k < n_caches; ++k) {
        if (caches[k].present != caches[k].past)
            free(caches[k].present);
        free(caches[k].past);
    }
    free(prompt);
    free(generated);
    free(mask_ones);
    free(pos);
    free(out_logits);
    return 0;
}
