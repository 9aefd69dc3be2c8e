/**
 * @mainpage foxhunt
 *
 * libfoxhunt runs one training step of a branching double-DQN agent with hindsight experience
 * replay, spectral normalisation and auxiliary learners (IQL value nets at a high and a low
 * expectile, IQN, an attention reward model, CQL, an ensemble, a recursive confidence head,
 * regime scaling), on the CPU (the reference, OpenBLAS GEMMs) or on an NVIDIA GPU as CUDA
 * graphs, behind the C ABI of foxhunt.h. Trainers drive it from C, Python (bindings/python,
 * ctypes) or Rust (bindings/rust, dlopen).
 *
 * The math of the step is the foxhunt specification, docs/SPEC.md (v1.3, named in docs/design.md).
 * Section numbers below (SPEC §n) refer to it.
 *
 * @section howto How to use it
 * @code
 *   fh_config cfg;
 *   fh_config_init(&cfg);               // SPEC §1 defaults
 *   cfg.batch_size = 256;
 *   fh_pipeline *p = NULL;
 *   if (fh_pipeline_create(&cfg, &p) != FH_OK) { puts(fh_last_error_message()); return 1; }
 *   fh_batch b = FH_BATCH_INIT;         // point its fields at your host arrays
 *   ...
 *   fh_pipeline_upload(p, &b);          // copies, validates; the arrays are yours again
 *   fh_pipeline_step(p);                // one training step (SPEC §5)
 *   fh_metrics m; m.struct_size = sizeof m;
 *   fh_pipeline_metrics(p, &m);
 *   fh_pipeline_destroy(p);
 * @endcode
 * Every call returns an ::fh_status to check. The README has the complete program (the
 * shapes of ::fh_batch, the goal tensors that goal_dim > 0 requires, the compiler line);
 * examples/trainer is a whole trainer on real market data.
 *
 * @section replay With a replay (SPEC §2.1, §5.0)
 * Set fh_config::replay_capacity (K rows) and fh_config::replay_envs (E environments that step
 * in lockstep). Instead of uploading batches, append rows of transitions as the environments
 * produce them, and let every step draw its batch from the replay:
 * @code
 *   cfg.replay_capacity = 100000; cfg.replay_envs = 16;
 *   ...
 *   fh_replay_rows rows = FH_REPLAY_ROWS_INIT;   // [R, E, ...] arrays, episode_end included
 *   rows.num_rows = 1; rows.num_envs = 16; ...
 *   fh_pipeline_insert(p, &rows);                 // validates and appends; arrays yours again
 *   fh_pipeline_train(p, 4);                      // 4 x (sample a batch, step)
 * @endcode
 *
 * @section data_parallel Over several GPUs (SPEC §9)
 * W processes (or threads), one GPU each, train one agent on W batches at once: each creates an
 * NCCL communicator of W ranks (ncclCommInitRank with a unique id shared by any means, or
 * ncclCommInitAll in one process) and passes it in fh_config::nccl_comm. Every rank uploads its
 * own batch of batch_size rows; together they take the step of SPEC §5 on the W·B rows, and
 * every rank ends each step with the same parameters (the gradients and batch sums are
 * all-reduced inside the step graph). examples/dp_trainer.c is a whole program:
 * @code
 *   ncclComm_t comm;                               // rank r of W, on GPU `dev`
 *   ncclCommInitRank(&comm, W, id, r);
 *   cfg.backend = FH_BACKEND_CUDA; cfg.device = dev; cfg.nccl_comm = comm;
 *   fh_pipeline_create(&cfg, &p);                  // collective: every rank at the same time
 *   for (...) { fh_pipeline_upload(p, &my_batch); fh_pipeline_step(p); }
 *   fh_pipeline_destroy(p);                        // then ncclCommDestroy(comm)
 * @endcode
 *
 * @section conventions Conventions
 * - Every function returns an ::fh_status. On failure, fh_last_error_message() (thread-local)
 *   names the argument, index and value at fault, and no state has changed: the pipeline stays
 *   usable exactly as it was. Nothing aborts, prints, or throws across this boundary.
 * - Tensors are float32, row-major, host memory unless a struct's `memory` field says
 *   ::FH_MEMORY_DEVICE. `[B, n]` is B rows of n floats.
 * - The caller owns every buffer it passes. Host arrays are read during the call only: the
 *   library copies what it needs before returning and keeps no caller pointer.
 * - Device memory (::FH_MEMORY_DEVICE, CUDA backend only; the CPU backend refuses it with
 *   FH_ERR_UNSUPPORTED): the call checks the struct and that every array it reads is device
 *   (or managed) memory of the pipeline's device (FH_ERR_BAD_VALUE naming the array if not),
 *   enqueues the work and returns without waiting for the GPU. The library reads the arrays
 *   on its own streams after the call, in order after the first child (sample or her) of the
 *   last step launched before the call, and checks every element there (SPEC §8, §2.1). So the arrays must be complete when the call is
 *   made (synchronise the stream that wrote them), and must stay allocated and unchanged until
 *   the next call on the same pipeline has returned: every call on a pipeline (any function
 *   taking it, fh_pipeline_sync() included; not fh_pipeline_destroy()) first waits until the
 *   device has finished reading the arrays of earlier calls. A refused device array changes
 *   nothing, exactly like refused host input, and the status and message that the same host
 *   input would have given ("rows.obs[3, 1, 7] = nan is not finite") are returned by that next
 *   call, which then does nothing else (call it again). The host makes no pass over device
 *   arrays: the device checks them and copies them (one device-to-device copy). So on the
 *   CUDA backend every function taking a pipeline, the read-only ones (fh_pipeline_backend(),
 *   fh_pipeline_config(), fh_pipeline_num_tensors(), fh_pipeline_tensor_info(),
 *   fh_pipeline_find_tensor(), fh_pipeline_memory(), ...) included, may return such a pending
 *   refusal (FH_ERR_NON_FINITE, FH_ERR_OUT_OF_RANGE, ...) or FH_ERR_CUDA besides the statuses
 *   listed for it.
 * - Structs that may grow begin with `struct_size`; set it to `sizeof` the struct (the
 *   initialisers do). A pipeline is not thread-safe: call it from one thread at a time.
 *
 * @section specification The specification
 * The math of the step is the foxhunt specification, @ref spec "docs/SPEC.md". The library
 * implements v1.3: the replay of §2.1 and §5.0 on both backends, and the data-parallel step of
 * §9 on the CUDA backend (v1.3 added those without changing the rest of v1.2). "SPEC §n" in
 * this reference is:
 * - @ref spec_1 "§1 Configuration": ::fh_config and its defaults (fh_config_init())
 * - @ref spec_2 "§2 The batch": ::fh_batch, fh_pipeline_upload()
 * - @ref spec_3 "§3 Randomness and initialisation": Philox draws, parameter init, tensor names
 * - @ref spec_4 "§4 Networks": the Q net, IQL, IQN and the attention reward model
 * - @ref spec_5 "§5 The step", fh_pipeline_step(): @ref spec_5_1 "5.1 her",
 *   @ref spec_5_2 "5.2 spectral", @ref spec_5_3 "5.3 ddqn", @ref spec_5_4 "5.4 forward",
 *   @ref spec_5_5 "5.5 aux", @ref spec_5_6 "5.6 adam"
 * - @ref spec_6 "§6 Readable after a step": ::fh_metrics, ::fh_timings, named tensors
 * - @ref spec_7 "§7 Acting": fh_pipeline_act()
 * - @ref spec_8 "§8 Input validity": what uploads refuse
 * - @ref spec_9 "§9 Data-parallel steps": fh_config::nccl_comm
 *
 * @section overview Design
 * One description of the step (the schedule: six child graphs, the lanes inside each, fork and
 * join points, as plain data built from the config) and two executors: the CPU reference runs
 * its tasks in order; the CUDA executor captures each child on its lanes (streams) and links the
 * children into one parent graph, so a step is one graph launch. Every network is one flat
 * float32 buffer, so EMA, Adam, clipping and checkpoints are single loops. Results are bitwise
 * reproducible run to run on one machine (fixed-order reductions, no atomics). The CPU backend's
 * GEMMs are OpenBLAS's, whose bits also depend on its thread count (OPENBLAS_NUM_THREADS) and
 * on the CPU's kernel: with another thread count or machine the same step differs in the last
 * bits (52 of 96 tensors after one step, by up to 2e-7, between 1 and 2 threads). On CUDA the
 * bits depend on the device and the library versions. The details, with the measured
 * speed on an H200: @ref design "docs/design.md" and docs/cuda.md.
 */
/**
 * @file foxhunt.h
 * @brief C ABI of libfoxhunt: one training step of a branching double-DQN agent with HER,
 *        spectral normalisation and auxiliary learners, on the CPU or as CUDA graphs.
 *
 * How to use it, the conventions every function follows and the specification's sections
 * (SPEC §n below refers to docs/SPEC.md): see the main page, the comment above.
 */
#ifndef FOXHUNT_H
#define FOXHUNT_H

#include <stddef.h>
#include <stdint.h>

/** Marks the exported C API (everything else in the library is hidden). */
#if defined(_WIN32)
#define FH_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FH_API __attribute__((visibility("default")))
#else
#define FH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** @name Version
 *  Semantic version of the library; fh_version() returns the same at run time. @{ */
#define FOXHUNT_VERSION_MAJOR 0 /**< incompatible ABI changes */
#define FOXHUNT_VERSION_MINOR 2 /**< compatible additions */
#define FOXHUNT_VERSION_PATCH 0 /**< fixes */
/** Packed version: major * 10000 + minor * 100 + patch. */
#define FOXHUNT_VERSION_NUMBER \
    (FOXHUNT_VERSION_MAJOR * 10000 + FOXHUNT_VERSION_MINOR * 100 + FOXHUNT_VERSION_PATCH)
/** @} */

/** Status of every call. 0 is success; the values are stable across versions. */
typedef enum fh_status {
    FH_OK = 0,
    FH_ERR_NULL_POINTER = 1,       /**< a required pointer argument (or batch tensor) was NULL */
    FH_ERR_STRUCT_SIZE = 2,        /**< struct_size does not match any size this library knows */
    FH_ERR_BAD_DIMENSION = 3,      /**< a config dimension is zero or absurdly large */
    FH_ERR_INDIVISIBLE = 4,        /**< obs_dim is not a multiple of attn_token_dim, or
                                        attn_d_model not a multiple of attn_heads */
    FH_ERR_BAD_VALUE = 5,          /**< a config scalar is out of its range (e.g. gamma > 1) */
    FH_ERR_NON_FINITE = 6,         /**< a float in the input is NaN or infinite */
    FH_ERR_OUT_OF_RANGE = 7,       /**< an index or value of the input is out of its range:
                                        an action, regime or done flag, a replay row's
                                        episode_end, a tensor index; or a call would take
                                        the step, act-call or rows-inserted count to 2^63 or
                                        past it (a count a checkpoint may not hold) */
    FH_ERR_NO_BATCH = 8,           /**< step called before any batch was uploaded */
    FH_ERR_UNKNOWN_NAME = 9,       /**< no tensor has that name (or, for a write, no
                                        writable one: the tensor is read-only) */
    FH_ERR_BUFFER_SIZE = 10,       /**< an element or row count does not match: a buffer
                                        against its tensor, a batch against batch_size, or
                                        zero rows where at least one is needed */
    FH_ERR_IO = 11,                /**< a file could not be opened, read or written */
    FH_ERR_CHECKPOINT_TRUNCATED = 12, /**< the checkpoint file ends early */
    FH_ERR_CHECKPOINT_CORRUPT = 13,   /**< bad magic, version or checksum */
    FH_ERR_CHECKPOINT_CONFIG = 14,    /**< the checkpoint was written by a different config */
    FH_ERR_NO_CUDA = 15,           /**< CUDA was requested but this build or machine has none */
    FH_ERR_CUDA = 16,              /**< a CUDA, cuBLAS or NCCL call failed (message names it) */
    FH_ERR_OUT_OF_MEMORY = 17,     /**< host or device allocation failed */
    FH_ERR_INTERNAL = 18,          /**< a bug in foxhunt; please report the message */
    FH_ERR_UNSUPPORTED = 19        /**< the request does not apply to this pipeline: an upload
                                        to a pipeline with a replay, an insert to one without,
                                        device memory on the CPU backend, or an NCCL
                                        communicator where there is no data-parallel step
                                        (message says which) */
} fh_status;

/** The name of a status as a static string, e.g. "FH_ERR_NON_FINITE"; "FH_ERR_UNKNOWN_STATUS"
 *  for a value that is no ::fh_status. Never NULL. */
FH_API const char *fh_status_string(fh_status status);

/** Message of the last failed call on this thread (empty string after a success); never NULL.
 *  Valid until the next foxhunt call on the same thread. */
FH_API const char *fh_last_error_message(void);

/** Run-time version, FOXHUNT_VERSION_NUMBER of the library actually loaded. */
FH_API uint32_t fh_version(void);

/** Which executor runs the step. */
typedef enum fh_backend {
    FH_BACKEND_AUTO = 0, /**< CUDA when this build has it and a device exists, else CPU */
    FH_BACKEND_CPU = 1,  /**< the CPU reference (OpenBLAS GEMMs) */
    FH_BACKEND_CUDA = 2  /**< CUDA graphs; fails with FH_ERR_NO_CUDA where unavailable */
} fh_backend;

/** How the CUDA executor places its lanes (ignored by the CPU backend). */
typedef enum fh_exec_mode {
    FH_EXEC_MULTI_STREAM = 0,  /**< each lane on its own stream (default) */
    FH_EXEC_SINGLE_STREAM = 1  /**< every lane on one stream (same results, bitwise) */
} fh_exec_mode;

/**
 * GEMM precision of the CUDA executor (the CPU backend is always strict). Every mode keeps
 * float32 master weights, gradients, Adam moments and activations in memory, and accumulates
 * in float32; the modes differ in the operands the tensor cores multiply. Any other value makes
 * fh_pipeline_create() and fh_memory_plan() fail with FH_ERR_BAD_VALUE.
 */
typedef enum fh_math_mode {
    FH_MATH_TF32 = 0,   /**< TF32 tensor cores (default): operands rounded to TF32 (10 stored
                             mantissa bits, round to nearest even); per tensor within ~2e-3 of
                             the CPU after 3 steps.
                             On Hopper (sm_90a code) the Q net's large SiLU layers run as one
                             kernel each and store their activations, and the trunk backward
                             its SiLU' outputs, rounded to TF32 (they are tensor-core operands;
                             the confidence head reads the rounded trunk features too); the
                             branch heads are then TF32 tensor-core products in those layers'
                             epilogue, as elsewhere in this mode. These layers and the
                             fused IQN and IQL kernels take SiLU, SiLU' and the logistic in
                             fast forms (__expf, __fdividef: within 2 + 1.2|z| float ulps of
                             the exact ones): docs/cuda.md */
    FH_MATH_STRICT = 1, /**< IEEE float32: per tensor within 1e-5 of the CPU after 1 step */
    FH_MATH_BF16 = 2    /**< the cuBLAS GEMMs on bfloat16 operands (7 stored mantissa bits,
                             rounded to nearest even from the float32 activations and weights
                             before each GEMM, by a staging pass or by the kernel that writes
                             the operand) with float32 accumulation. On Hopper the Q
                             net's large SiLU layers, their branch heads and the trunk
                             backward's SiLU' layers run on TF32 mode's fused kernels with
                             their operands rounded to bfloat16 instead of TF32 (weights, the
                             first layer's input, and the activations and SiLU' outputs they
                             store): TF32 tensor cores multiply bfloat16 values exactly, so
                             these are BF16 products with float32 accumulation, at TF32's rate,
                             with SiLU and SiLU' in the fast forms of FH_MATH_TF32. The stored
                             trunk and branch activations are then bfloat16 values for every
                             reader (the confidence head, the branch backward's dU). So do the
                             attention learner's output projection and reward head at the
                             default widths (one fused kernel, its operands rounded to
                             bfloat16). The fused IQN kernels (iqn_hidden = 128, iqn_cos = 64)
                             multiply bfloat16 operands on bfloat16 tensor cores (mma.sync
                             m16n8k16, float32 accumulation). The fused IQL and attention core
                             tensor-core kernels keep TF32 operands, and the branch backward
                             below the heads (dU, de, the
                             SiLU' and dc) runs in float32 with double sums. Where a kernel
                             writes a GEMM's operands it writes them already rounded, and the
                             GEMM reads them as they are: IQN's weight gradient dWm on
                             operands stored as bfloat16 (and dWφ, on its own kernel, on
                             dφpre so stored); on float32 operands holding bfloat16
                             values (the same round to nearest even, the same exact products)
                             dV, the trunk's dW2, dW1 and d_states, IQL's dW2 and dW1, IQN's
                             dWψ, CQL's dU and the attention head's dWr1, with x̃ rounded once
                             by HER into a [B, D] copy (+4·B·D bytes). Per tensor within ~6e-3
                             of the CPU after 1 step, ~1e-2 after 3 at B = 16384
                             (docs/cuda.md). Costs an 8 MiB staging buffer per cuBLAS
                             workspace, and time: docs/cuda.md */
} fh_math_mode;

/** How the two IQL value nets share their GEMMs on CUDA (FH_MATH_BF16: always sequential). In
 *  TF32 and BF16 modes at iql_hidden = 128 with obs_dim + goal_dim a multiple of 8 up to 128, the
 *  forward, the loss head and the input-side backward are one fused tensor-core kernel instead
 *  (docs/cuda.md), and this applies to the two weight-gradient GEMMs only. */
typedef enum fh_iql_gemm {
    FH_IQL_GEMM_AUTO = 0,       /**< the fastest measured on the H200: sequential */
    FH_IQL_GEMM_GROUPED = 1,    /**< cublasGemmGroupedBatchedEx (cuBLAS >= 12.5, aligned
                                     operands; otherwise sequential) */
    FH_IQL_GEMM_BATCHED = 2,    /**< cublasGemmStridedBatchedEx over stacked weights */
    FH_IQL_GEMM_SEQUENTIAL = 3  /**< two plain GEMMs per layer */
} fh_iql_gemm;

/** Where the arrays of an ::fh_batch or ::fh_replay_rows live. */
typedef enum fh_memory_kind {
    FH_MEMORY_HOST = 0,  /**< host memory (pageable or pinned), read during the call */
    FH_MEMORY_DEVICE = 1 /**< CUDA device (or managed) memory of the pipeline's device, read
                              asynchronously (see "Device memory" in the conventions above);
                              CUDA backend only */
} fh_memory_kind;

/** HER relabelled reward (SPEC §1 her_reward). */
typedef enum fh_her_reward {
    FH_HER_REWARD_SPARSE = 0, /**< r = 0 if ||ag' - g||_2 <= eps else -1 */
    FH_HER_REWARD_DENSE = 1   /**< r = -||ag' - g||_2 */
} fh_her_reward;

/** Bits of fh_config::sn_layers: trunk layers under spectral normalisation (SPEC §5.2). */
#define FH_SN_W1 1u /**< first trunk layer, W1 [H, D] */
#define FH_SN_W2 2u /**< second trunk layer, W2 [H, H] (the default) */

/** Most regimes a config may have (num_regimes). */
#define FH_MAX_REGIMES 64

/**
 * Pipeline configuration, SPEC §1. Fill with fh_config_init(), then change fields.
 * Dimensions are counts of float32 elements; learning rates are per Adam step. Each field's
 * accepted range is given beside it (default in parentheses); a "width" is in [1, 16384], and
 * every float field must be finite. Beyond the ranges, fh_pipeline_create() refuses more than
 * 1024 attention tokens (obs_dim / attn_token_dim, plus one with a goal), and dimensions whose
 * product would make an array that the CUDA executor indexes with 32-bit integers hold more
 * than 2^31 - 1 elements, on both backends so that checkpoints move between them (the message
 * names the array: [x~; x~'], the trunk and branch caches, the IQN features, the IQL
 * activations). The CUDA backend also refuses, with FH_ERR_BAD_DIMENSION naming the kernel, a
 * head whose per-block sums do not fit the device's shared memory: iql_hidden, iqn_hidden or
 * attn_head_hidden above about 14 500 on an H200 (227 KiB per block); the CPU backend takes
 * them.
 */
typedef struct fh_config {
    size_t struct_size;        /**< sizeof(fh_config) */
    int32_t backend;           /**< ::fh_backend */
    int32_t device;            /**< CUDA device ordinal, >= 0 (0) */
    int32_t exec_mode;         /**< ::fh_exec_mode */
    int32_t math_mode;         /**< ::fh_math_mode */
    int32_t iql_gemm;          /**< ::fh_iql_gemm */
    uint32_t workspace_mib;    /**< cuBLAS workspace of a lane, MiB, in [1, 4096] (32); a lane that
                                    runs only branch layers gets half, and lanes that never run
                                    at the same time share one. A float32 GEMM (strict and
                                    TF32 modes) runs the first algorithm cuBLASLt's
                                    heuristics rank for max(its lane's workspace, 32 MiB) that
                                    fits that workspace, else the first ranked for the
                                    workspace itself (docs/cuda.md) */

    uint32_t batch_size;       /**< B, transitions per step, in [1, 2^20] (16384) */
    uint32_t obs_dim;          /**< O, a width (124) */
    uint32_t goal_dim;         /**< G, 0 or a width (4); 0 disables HER and the goal token */
    uint32_t num_branches;     /**< NB action branches, in [1, 64] (4) */
    uint32_t actions_per_branch; /**< A sub-actions per branch, in [1, 1024] (8) */
    uint32_t trunk_hidden;     /**< H, a width (256) */
    uint32_t branch_hidden;    /**< HB, a width (128) */
    float q_clip;              /**< branch outputs clamped to [-q_clip, q_clip]; > 0 (100) */
    float gamma;               /**< discount, in [0, 1] (0.99) */
    float huber_kappa;         /**< Huber threshold of TD and IQN losses, > 0 (1.0) */

    float her_ratio;           /**< relabel probability, in [0, 1] (0.8) */
    float her_epsilon;         /**< success radius, >= 0 (0.05) */
    int32_t her_reward;        /**< ::fh_her_reward (sparse) */
    int32_t her_terminal_on_success; /**< 0 or 1 (1) */
    uint32_t sn_layers;        /**< FH_SN_W1 | FH_SN_W2 bits (FH_SN_W2) */

    uint32_t iql_hidden;       /**< IQL value-net width, a width (128) */
    float iql_tau_hi;          /**< expectile of the "high" IQL net, in (0, 1) (0.9) */
    float iql_tau_lo;          /**< expectile of the "low" IQL net, in (0, 1) (0.1) */
    float awr_beta;            /**< advantage-weight temperature, >= 0 (3.0) */
    float awr_max;             /**< advantage-weight cap, > 0 (100) */

    uint32_t iqn_hidden;       /**< IQN embedding width Hq, a width (128) */
    uint32_t iqn_cos;          /**< cosine features, a width (64) */
    uint32_t iqn_n;            /**< online quantile samples N, in [1, 256] (8) */
    uint32_t iqn_n_target;     /**< target quantile samples N', in [1, 256] (8) */

    uint32_t attn_token_dim;   /**< floats per obs token, a width; must divide obs_dim (4) */
    uint32_t attn_d_model;     /**< attention width d, in [1, 4096] (64) */
    uint32_t attn_heads;       /**< heads, in [1, 256]; must divide attn_d_model (4) */
    uint32_t attn_head_hidden; /**< reward-head hidden width, a width (64) */

    float cql_alpha;           /**< CQL weight, >= 0; 0 disables (0.1) */
    uint32_t num_regimes;      /**< R in [1, FH_MAX_REGIMES]; 1 disables regime scaling (4) */
    float regime_beta;         /**< regime-scale EMA rate, in [0, 1) (0.99) */
    float regime_min;          /**< lower clamp of the scale, > 0 (0.25) */
    float regime_max;          /**< upper clamp, > regime_min (4.0) */

    float ema_tau;             /**< Polyak rate of target nets, in [0, 1] (0.005) */
    float lr_q;                /**< Adam learning rate of the Q net, >= 0 (3e-4) */
    float lr_aux;              /**< Adam learning rate of IQL, IQN, attention, >= 0 (3e-4) */
    float adam_beta1;          /**< in [0, 1) (0.9) */
    float adam_beta2;          /**< in [0, 1) (0.999) */
    float adam_eps;            /**< > 0 (1e-8) */
    float clip_norm;           /**< global-norm clip of the Q-net gradient, > 0 (10) */
    uint64_t seed;             /**< all randomness derives from it (0) */

    /* Added in 0.2; a config of the 0.1 size (ending at seed) is accepted as having no replay. */
    uint32_t replay_capacity;  /**< K, rows the replay keeps (SPEC §2.1); 0 = no replay: steps
                                    train on uploaded batches (0) */
    uint32_t replay_envs;      /**< E, transitions per row (environments stepping in lockstep);
                                    0 exactly when replay_capacity is 0, and K * E <= 2^32 (0) */
    /** Data-parallel steps (SPEC §9): an `ncclComm_t` of W ranks, or NULL (the default) for a
     *  pipeline of its own. Opaque here (foxhunt.h does not include nccl.h): pass the
     *  communicator itself, cast to `void *`. The caller creates it (ncclCommInitRank,
     *  ncclCommInitAll, ...) on config.device and owns it: it must outlive the pipeline
     *  (destroy the pipeline, then the communicator) and carry no other NCCL work while the
     *  pipeline's steps run. Rank r and W come from ncclCommUserRank and ncclCommCount. Each
     *  rank's pipeline has its own batch of batch_size rows; the ranks together take the step
     *  of SPEC §5 on the W·batch_size rows (rank r's row i is row r·batch_size + i: Philox
     *  counters, SPEC §9), every batch mean and gradient over all of them, so every rank
     *  applies the same update and holds the same parameters after every step. The metrics are
     *  those of the whole step on every rank; d_states, the ensemble outputs and the confidence
     *  stay per row, on the rank that owns the row. W = 1 is exactly a pipeline without a
     *  communicator. Every rank must use the same config, seed included (device and
     *  nccl_comm aside). fh_pipeline_create, fh_pipeline_step and fh_pipeline_train are
     *  collective: every rank makes the same sequence of them (creation waits on the host, a
     *  step on the GPU, until every rank takes part); fh_pipeline_load and
     *  fh_pipeline_write_tensor must get the same contents on every rank, or the ranks'
     *  states part. CUDA backend only, in a build with NCCL >= 2.9 (see the README); the CPU
     *  backend and builds without NCCL refuse it (FH_ERR_UNSUPPORTED). (NULL) */
    void *nccl_comm;
} fh_config;

/** Fill @p config with SPEC §1's defaults and struct_size. FH_ERR_NULL_POINTER if NULL. */
FH_API fh_status fh_config_init(fh_config *config);

/**
 * One step's input, SPEC §2: arrays of batch_size rows, row-major, owned by the caller. Host
 * arrays are read only during fh_pipeline_upload() (the library keeps no pointer); device
 * arrays (memory = ::FH_MEMORY_DEVICE) as the conventions above say. Optional tensors may be
 * NULL: goal, next_achieved_goal and her_goal when goal_dim = 0 (required otherwise; with
 * goal_dim = 0 they are ignored, not read, whatever they hold), and regime (then every
 * transition is regime 0).
 */
typedef struct fh_batch {
    size_t struct_size;                /**< sizeof(fh_batch) */
    uint32_t batch_size;               /**< rows; must equal the config's batch_size */
    const float *obs;                  /**< [B, O] state s */
    const float *goal;                 /**< [B, G] desired goal g */
    const int32_t *action;             /**< [B, NB], each in [0, A) */
    const float *reward;               /**< [B] environment reward */
    const uint8_t *done;               /**< [B], 0 or 1: s' terminal */
    const float *next_obs;             /**< [B, O] s' */
    const float *next_achieved_goal;   /**< [B, G] ag', achieved goal at s' */
    const float *her_goal;             /**< [B, G] a future achieved goal of the episode */
    const int32_t *regime;             /**< [B] in [0, R), or NULL */
    /* Added in 0.2; a batch of the 0.1 size (ending at regime) is host memory. */
    int32_t memory;                    /**< ::fh_memory_kind of every array above (host) */
} fh_batch;

/** Static initialiser of ::fh_batch: struct_size set, host memory, everything else zero. */
#define FH_BATCH_INIT \
    {sizeof(fh_batch), 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, FH_MEMORY_HOST}

/**
 * Rows to append to the pipeline's replay (SPEC §2.1): num_rows rows of num_envs transitions,
 * every array row-major [R, E, ...], so element (r, e) is environment e's transition in row r.
 * Rows are in time order (row R - 1 is the newest). The fields are those of ::fh_batch without
 * her_goal (the step draws HER goals from the replay, SPEC §5.0), plus episode_end. Host arrays
 * are read only during fh_pipeline_insert(); device arrays as the conventions above say.
 * Optional: goal and next_achieved_goal when goal_dim = 0 (required otherwise; ignored, not
 * read, with goal_dim = 0), and regime (then 0).
 */
typedef struct fh_replay_rows {
    size_t struct_size;                /**< sizeof(fh_replay_rows) */
    uint32_t num_rows;                 /**< R >= 1 rows (more than replay_capacity is allowed:
                                            only the newest replay_capacity stay) */
    uint32_t num_envs;                 /**< E; must equal the config's replay_envs */
    int32_t memory;                    /**< ::fh_memory_kind of every array below (host) */
    const float *obs;                  /**< [R, E, O] state s */
    const float *goal;                 /**< [R, E, G] desired goal g */
    const int32_t *action;             /**< [R, E, NB], each in [0, A) */
    const float *reward;               /**< [R, E] environment reward */
    const uint8_t *done;               /**< [R, E], 0 or 1: s' terminal (1 requires
                                            episode_end = 1) */
    const float *next_obs;             /**< [R, E, O] s' */
    const float *next_achieved_goal;   /**< [R, E, G] ag', achieved goal at s' */
    const int32_t *regime;             /**< [R, E] in [0, num_regimes), or NULL */
    const uint8_t *episode_end;        /**< [R, E], 0 or 1: the environment's episode ended with
                                            this transition (termination or time limit) */
} fh_replay_rows;

/** Static initialiser of ::fh_replay_rows: struct_size set, host memory, the rest zero. */
#define FH_REPLAY_ROWS_INIT \
    {sizeof(fh_replay_rows), 0, 0, FH_MEMORY_HOST, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
     NULL, NULL}

/**
 * Metrics of the last completed step, SPEC §6. Losses are the values whose gradients that step
 * applied (or, for a step the divergence guard skipped, would have applied). A learner the
 * config disables reports 0.
 */
typedef struct fh_metrics {
    size_t struct_size;        /**< sizeof(fh_metrics) */
    uint64_t step;             /**< steps completed */
    float td_loss;             /**< L_td, SPEC §5.4 (regime-weighted Huber) */
    float q_mean;              /**< mean of the online q_b(x~_i)[a_ib] before the update */
    float cql_loss;            /**< L_cql, SPEC §5.5 step 5 */
    float iql_loss_hi;         /**< expectile loss of V_hi, SPEC §5.5 step 2 */
    float iql_loss_lo;         /**< expectile loss of V_lo */
    float iqn_loss;            /**< quantile Huber loss, SPEC §5.5 step 3 */
    float attn_loss;           /**< attention reward MSE, SPEC §5.5 step 4 */
    float conf_loss;           /**< confidence loss L_conf, SPEC §5.5 step 7 */
    float grad_norm;           /**< global L2 norm of the Q-net gradient before clipping */
    float sigma[2];            /**< spectral sigma of W1, W2 (0 if that layer has no SN) */
    float sigma_target[2];     /**< the same for the target net */
    float ensemble_std;        /**< mean_i sqrt(s^2_i), SPEC §5.5 step 6 */
    uint32_t num_relabelled;   /**< transitions whose goal HER relabelled */
    uint32_t num_regimes;      /**< R: entries of regime_scale that are set */
    float regime_scale[FH_MAX_REGIMES]; /**< rho_k after this step's update */
    /* Added in 0.2; metrics of the 0.1 size (ending at regime_scale) get the fields above. */
    uint64_t steps_skipped;    /**< steps the divergence guard skipped since the pipeline was
                                    created (see fh_pipeline_step()) */
    uint32_t last_step_skipped; /**< 1 if the step these metrics describe applied no update
                                     (its losses may then read NaN or infinity), else 0 */
} fh_metrics;

/**
 * Milliseconds of the last completed step per child graph (SPEC §5) and per aux learner.
 * On CUDA these come from event-record nodes inside the graph; on the CPU from a steady clock.
 * On CUDA the events after the children and around the aux learners record beside the work
 * that follows them rather than holding it back, so each time also carries the difference of
 * its two events' recording delays (microseconds).
 */
typedef struct fh_timings {
    size_t struct_size; /**< sizeof(fh_timings) */
    float her_ms;       /**< child her: HER relabelling, SPEC §5.1, then the divergence
                             guard's snapshot of the state but the spectral u */
    float spectral_ms;  /**< child spectral: the guard's snapshot of u and the power
                             iteration, SPEC §5.2; multi-stream, it runs beside the her child
                             and is timed from the same start */
    float ddqn_ms;      /**< child ddqn: targets, SPEC §5.3 (and HER's relabel count) */
    float forward_ms;   /**< child forward: forward, TD loss, backward, SPEC §5.4; with
                             at least two branches also IQL (SPEC §5.5 step 2), beside the
                             trunk backward: nothing between reads what it writes */
    float aux_ms;       /**< child aux: EMA and auxiliary learners, SPEC §5.5 (IQL only with
                             a single branch: see forward_ms) */
    float adam_ms;      /**< child adam: clip and Adam of the Q net, SPEC §5.6 */
    float total_ms;     /**< first child's start to last child's end */
    float aux_ema_ms;   /**< EMA of the target nets (SPEC §5.5 step 1), on the forward
                             child's main lane beside the branch backward (nothing reads the
                             targets between ddqn and the aux child) */
    float aux_iql_ms;   /**< both IQL trainers (in the forward child where forward_ms says so,
                             else on the aux main lane) */
    float aux_iqn_ms;   /**< aux IQN lane: loss and gradient, then (one rank) its Adam step */
    float aux_attn_ms;  /**< aux attention lane: loss and gradient, then (one rank) its Adam
                             step */
    float aux_tail_ms;  /**< ensemble and confidence head, on the IQN lane after IQN (beside
                             the attention lane); in a data-parallel step (SPEC §9) until the
                             Adam steps of IQN and attention after the join. (CQL and the
                             regime scale run on a lane of their own, timed in aux_ms.) */
    /* Added in 0.2; timings of the 0.1 size (ending at aux_tail_ms) get the fields above. */
    float sample_ms;    /**< child sample: the batch drawn from the replay, SPEC §5.0 (0
                             without a replay) */
} fh_timings;

/** Parameter groups of fh_tensor_info::group. */
typedef enum fh_group {
    FH_GROUP_Q = 0,        /**< online Q net (trunk, branches, confidence head) */
    FH_GROUP_IQL_HI = 1,
    FH_GROUP_IQL_LO = 2,
    FH_GROUP_IQN = 3,
    FH_GROUP_ATTN = 4,
    FH_GROUP_Q_TARGET = 5,   /**< "target.q.*" */
    FH_GROUP_IQN_TARGET = 6, /**< "target.iqn.*" */
    FH_GROUP_STATE = 7,      /**< spectral vectors ("sn.u.W2"), regime state ("regime.s") */
    FH_GROUP_OUTPUT = 8      /**< read-only step outputs: d_states, ensemble_mean, ... */
} fh_group;

/** Description of one named tensor. */
typedef struct fh_tensor_info {
    size_t struct_size; /**< sizeof(fh_tensor_info) */
    const char *name;   /**< canonical name (SPEC §3), owned by the pipeline */
    uint32_t rows;      /**< 1 for vectors */
    uint32_t cols;      /**< elements per row */
    int32_t group;      /**< ::fh_group */
    int32_t writable;   /**< 1 if fh_pipeline_write_tensor accepts it */
} fh_tensor_info;

/** Memory a pipeline holds, in bytes, by category. */
typedef struct fh_memory_report {
    size_t struct_size;        /**< sizeof(fh_memory_report) */
    uint64_t parameters;       /**< parameters, targets, gradients, Adam moments, and the
                                    divergence guard's copy of the state */
    uint64_t activations;      /**< forward caches and intermediates */
    uint64_t workspaces;       /**< cuBLAS workspaces, all lanes (0 on the CPU) */
    uint64_t batch_staging;    /**< batch buffers (pinned host + device on CUDA) */
    uint64_t total;            /**< the sum of every other field, replay included */
    /* Added in 0.2; a report of the 0.1 size (ending at total) gets the fields above. */
    uint64_t replay;           /**< the replay's rows and episode table, and on CUDA the pinned
                                    staging of host inserts (0 without a replay) */
} fh_memory_report;

/**
 * The memory plan of a config: the bytes a pipeline created from @p config would hold once it
 * has stepped, by category, computed from the dimensions without creating it (nothing large is
 * allocated). FH_BACKEND_AUTO resolves as in fh_pipeline_create(). On the CPU the numbers are
 * exactly fh_pipeline_memory()'s after the first step; on CUDA, computed from the executor's
 * allocations and the attention kernels' sizes on config.device (their partial sums follow
 * its occupancy), they are fh_pipeline_memory()'s after the first step, category by category
 * (tests/test_cuda_memory_plan.cpp). Includes the divergence guard's copy of the state (in
 * parameters) and, with replay_capacity > 0, the replay (its rows and episode table; on CUDA
 * also the pinned staging of host inserts). With config.nccl_comm the communicator is asked
 * for its rank and size, as fh_pipeline_create() does.
 * @param config  as for fh_pipeline_create(); validated the same way, with the same statuses.
 * @param report  out; its struct_size must be set (the 0.1 size, without replay, is accepted);
 *                unchanged unless FH_OK is returned.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_STRUCT_SIZE (of @p config or @p report);
 *         FH_ERR_BAD_DIMENSION; FH_ERR_INDIVISIBLE; FH_ERR_BAD_VALUE; FH_ERR_NO_CUDA;
 *         FH_ERR_UNSUPPORTED (a communicator with the CPU backend or in a build without NCCL);
 *         FH_ERR_CUDA (an NCCL query failed).
 */
FH_API fh_status fh_memory_plan(const struct fh_config *config,
                                struct fh_memory_report *report);

/** Opaque pipeline handle. */
typedef struct fh_pipeline fh_pipeline;

/**
 * Create a pipeline: validate @p config, check that the memory it needs is there, allocate (the
 * replay too, when the config has one), initialise parameters from the seed (SPEC §3) and, on
 * CUDA, capture the step graph.
 *
 * Before allocating anything, the memory the config needs (fh_memory_plan(), plus the largest
 * scratch a step holds briefly) is compared with what is available: host memory (MemAvailable,
 * or less under a cgroup v2 memory.max) and, on CUDA, the device's free memory
 * (cudaMemGetInfo). A config that does not fit is refused at once with FH_ERR_OUT_OF_MEMORY and
 * a message "config needs X bytes of host memory (...), Y available (...)". Allocation can still
 * fail later if other processes take the memory meanwhile; then too nothing is left allocated.
 * One case escapes this: the CPU backend's GEMMs go through OpenBLAS, which maps its own
 * buffers (about 128 MiB per BLAS thread with Debian 12's OpenBLAS 0.3.21) at the first GEMM a
 * thread runs in the process. Where an address-space limit (RLIMIT_AS) leaves no room for them,
 * that OpenBLAS retries the mapping forever (OpenMathLib/OpenBLAS#5289; later versions exit
 * the process instead), so the first CPU step hangs rather than returning
 * FH_ERR_OUT_OF_MEMORY; leave that much headroom under such a limit.
 * @param config  filled by fh_config_init() and edited; copied. The 0.1 size of the struct is
 *                accepted (no replay).
 * @param out     receives the handle (NULL on failure).
 * With fh_config::nccl_comm set, creation is collective: every rank of the communicator must
 * create its pipeline at the same time (from its own process or thread), since the step graph
 * is run once and captured with the communicator's all-reduces in it.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_STRUCT_SIZE; FH_ERR_BAD_DIMENSION (a dimension out
 *         of its range, or dimensions whose product makes an array of more than 2^31 - 1
 *         elements: see ::fh_config; also: only one of replay_capacity and replay_envs is 0,
 *         or their product exceeds 2^32, or W·batch_size exceeds 2^32 with a communicator of
 *         W ranks);
 *         FH_ERR_INDIVISIBLE; FH_ERR_BAD_VALUE (also: the communicator's device is not
 *         config.device); FH_ERR_NO_CUDA; FH_ERR_UNSUPPORTED (a communicator with the CPU
 *         backend, AUTO resolving to it included, or in a build without NCCL);
 *         FH_ERR_CUDA (a CUDA, cuBLAS or NCCL call failed: the message names it);
 *         FH_ERR_OUT_OF_MEMORY (the config needs more than is available, or an allocation
 *         failed).
 */
FH_API fh_status fh_pipeline_create(const fh_config *config, fh_pipeline **out);

/** Destroy a pipeline; NULL is a no-op. */
FH_API void fh_pipeline_destroy(fh_pipeline *pipeline);

/** The backend actually in use (::fh_backend, never AUTO). FH_ERR_NULL_POINTER. */
FH_API fh_status fh_pipeline_backend(const fh_pipeline *pipeline, int32_t *backend);

/** A copy of the pipeline's config, with backend resolved (a config of the 0.1 size gets the
 *  fields it has). FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE. */
FH_API fh_status fh_pipeline_config(const fh_pipeline *pipeline, fh_config *config);

/**
 * Validate and copy one batch (SPEC §2, §8); the next fh_pipeline_step() trains on it, and so
 * does every later step until the next upload. Every element of host arrays is checked while
 * it is copied (one pass over the caller's arrays, into a buffer the step does not use). On
 * CUDA the copy to the device is asynchronous and double-buffered: uploading batch t+1
 * overlaps step t. Device arrays (CUDA) are checked and copied on the device, and a refusal is
 * returned by the next call (see "Device memory" in the conventions).
 * Finite values of any size are accepted; values large enough to overflow the step (around
 * 1e11 and up at the default sizes) make the divergence guard skip the step (fh_pipeline_step()).
 * A pipeline with a replay draws its batches from it and refuses uploads (FH_ERR_UNSUPPORTED).
 * @return FH_OK; FH_ERR_NULL_POINTER (handle, batch, or a required tensor);
 *         FH_ERR_STRUCT_SIZE (neither the 0.1 nor the current size);
 *         FH_ERR_BUFFER_SIZE (batch_size differs from the config);
 *         FH_ERR_BAD_VALUE (memory is not an ::fh_memory_kind, or a device array is not
 *         device memory of the pipeline's device);
 *         FH_ERR_NON_FINITE; FH_ERR_OUT_OF_RANGE (action, regime or done);
 *         FH_ERR_UNSUPPORTED (the pipeline has a replay; device memory on the CPU backend);
 *         FH_ERR_OUT_OF_MEMORY; FH_ERR_CUDA.
 *         A refused batch changes nothing: the previous batch stays current.
 */
FH_API fh_status fh_pipeline_upload(fh_pipeline *pipeline, const fh_batch *batch);

/**
 * Run one training step (SPEC §5) on the current batch, or, with a replay, on a batch drawn
 * from the replay first (SPEC §5.0: the child "sample" at the head of the step). On CUDA this
 * launches the captured graph and returns without waiting for it; reading metrics, timings or
 * tensors waits. With fh_config::nccl_comm the step is collective (SPEC §9): its all-reduces
 * wait on the GPU until every rank has launched the same step.
 *
 * Divergence guard: a step whose losses, gradient norm or resulting state (parameters, targets,
 * Adam moments, spectral vectors, regime state) hold a NaN or infinity applies no update: all of
 * that state stays bitwise as it was before the step, as a mixed-precision loss scaler
 * (PyTorch's GradScaler) skips an optimizer step. The step counter still advances (the next
 * step draws new random numbers, and with a replay a new batch; Adam's t = step + 1 counts it),
 * the step's outputs (d_states, ensemble, confidence) and metrics describe the skipped step,
 * fh_metrics::last_step_skipped is 1 and fh_metrics::steps_skipped counts it. A step never
 * changes the replay (only inserts and loads do), so a skipped step leaves it as it was too.
 * The decision is made where the step runs (on CUDA on the device), so this call cannot report
 * it: fh_pipeline_check() does. Extreme but finite inputs (obs around 1e11 with rewards around
 * 1e12 at the default sizes) or hyperparameters (lr_q = 1e20) trigger it.
 * @return FH_OK (also for a step the guard skips); FH_ERR_NULL_POINTER; FH_ERR_NO_BATCH (no
 *         batch uploaded yet, or, with a replay, no row inserted yet: SPEC §2.1; nothing
 *         changes); FH_ERR_OUT_OF_RANGE (the step count would reach 2^63, which a checkpoint
 *         may not hold: only a doctored checkpoint starts that close; nothing runs);
 *         FH_ERR_OUT_OF_MEMORY (the first step allocates the caches; the state is then
 *         left as it was and what the step allocated is freed); FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_step(fh_pipeline *pipeline);

/**
 * Run @p k steps back to back, exactly as k calls of fh_pipeline_step() would (each draws its
 * own batch from the replay, with a replay; all train on the current batch without), but with
 * no host round trip between them (on CUDA: k launches of the step graph, queued at once).
 * Metrics and timings afterwards are those of the last step.
 * @param pipeline  the pipeline
 * @param k         steps, >= 1
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_BAD_VALUE (k = 0); FH_ERR_NO_BATCH (as
 *         fh_pipeline_step(); nothing runs); FH_ERR_OUT_OF_RANGE (the step count would reach
 *         2^63, as fh_pipeline_step(); nothing runs); FH_ERR_OUT_OF_MEMORY (the first step ever
 *         allocates; then no step has run); FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_train(fh_pipeline *pipeline, uint32_t k);

/**
 * Append rows to the pipeline's replay (SPEC §2.1): rows are numbered in insertion order, row
 * n lives in slot n mod replay_capacity, and the newest min(rows inserted, replay_capacity)
 * rows are the ones steps sample from (SPEC §5.0). Every element is checked (SPEC §8; besides,
 * episode_end is 0 or 1, and done = 1 requires episode_end = 1) before any row is written, so
 * a refused insert changes nothing. Host arrays are checked on the host: on the CPU in one
 * read-only pass, then copied (only the rows that stay); on CUDA while they are copied into
 * pinned staging that no step reads (in a read-only pass first when the insert is larger than
 * the staging, 16 MiB), then appended on the device asynchronously, without waiting for a
 * step in flight. Device arrays (CUDA) are checked and appended on the device, and a refusal
 * is returned by the next call (see "Device memory" in the conventions). The next step
 * samples from the replay with these rows.
 * Episodes: in each environment's column, an episode is a run of rows of which only the last
 * has episode_end = 1, or the run after the last such row, open at the newest row; a HER goal
 * is drawn from later rows of the same episode only.
 * @return FH_OK; FH_ERR_NULL_POINTER (handle, rows, or a required array);
 *         FH_ERR_STRUCT_SIZE; FH_ERR_BUFFER_SIZE (num_rows = 0, or num_envs differs from the
 *         config's replay_envs); FH_ERR_BAD_VALUE (memory is not an ::fh_memory_kind, or
 *         a device array is not device memory of the pipeline's device);
 *         FH_ERR_NON_FINITE; FH_ERR_OUT_OF_RANGE (action, regime, done or episode_end out of
 *         range, or done = 1 with episode_end = 0; or the rows-inserted count would reach 2^63,
 *         which a checkpoint may not hold: checked after the struct and its sizes, before the
 *         arrays and their elements); FH_ERR_UNSUPPORTED (the pipeline has no
 *         replay; device memory on the CPU backend); FH_ERR_OUT_OF_MEMORY (a host allocation
 *         failed); FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_insert(fh_pipeline *pipeline, const fh_replay_rows *rows);

/**
 * Wait until the pipeline's queued work (steps, uploads, inserts) has finished, and return the
 * error of a refused device-memory upload or insert if one is pending (see "Device memory"
 * above). Returns at once on the CPU backend, where every call finishes before it returns.
 * @return FH_OK; FH_ERR_NULL_POINTER; a pending refusal's status; FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_sync(fh_pipeline *pipeline);

/**
 * Greedy / epsilon-greedy action of the online net (SPEC §7). Changes no training state
 * except the act counter that seeds exploration.
 * @param pipeline   the pipeline
 * @param obs        [n, O]
 * @param goal       [n, G], NULL when goal_dim = 0
 * @param n          rows, >= 1
 * @param epsilon    exploration probability in [0, 1]
 * @param actions    out [n, NB] int32
 * @param q_values   out [n, NB, A] clamped q, or NULL
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_BUFFER_SIZE (n = 0); FH_ERR_BAD_VALUE (epsilon);
 *         FH_ERR_NON_FINITE (a NaN or infinity in obs or goal, or a q-value that is not finite,
 *         naming its row, branch and action: finite parameters so large that the net overflows;
 *         then no action is chosen, the act counter does not advance, and the contents of
 *         @p actions and @p q_values are unspecified); FH_ERR_OUT_OF_RANGE (the act-call count
 *         would reach 2^63, which a checkpoint may not hold; checked after the arguments and
 *         obs, goal; nothing runs);
 *         FH_ERR_OUT_OF_MEMORY (scratch for n rows); FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_act(fh_pipeline *pipeline, const float *obs, const float *goal,
                                 uint32_t n, float epsilon, int32_t *actions, float *q_values);

/**
 * Report divergence: whether the divergence guard skipped a step since the last call of this
 * function (or since creation, or the last fh_pipeline_load()); then starts afresh. Waits for
 * the steps launched so far (on CUDA, a host synchronisation).
 * @return FH_OK: no step was skipped; FH_ERR_NON_FINITE: at least one was, and the message names
 *         the first non-finite quantity of the first one and its value, e.g. "step 7 applied no
 *         update: adam_v of attn.w_r2[0, 6] = inf is not finite (...)"; the quantities are
 *         checked in the order td_loss, q_mean, cql_loss, iql_loss_hi, iql_loss_lo, iqn_loss,
 *         attn_loss, conf_loss, grad_norm, sigma, sigma_target, ensemble_std, then every state
 *         element (parameters, targets, Adam moments, spectral u, regime state, in checkpoint
 *         order); FH_ERR_NULL_POINTER; FH_ERR_INTERNAL (an executor built without the guard);
 *         FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_check(fh_pipeline *pipeline);

/** Metrics of the last completed step. Before the first step, and after fh_pipeline_load()
 *  until the next step, every loss reads 0 while step and regime_scale give the current state.
 *  The 0.1 size of the struct is accepted too. FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE,
 *  FH_ERR_CUDA. */
FH_API fh_status fh_pipeline_metrics(fh_pipeline *pipeline, fh_metrics *metrics);

/** Timings of the last completed step (all zero before the first, and after a load until the
 *  next step). The 0.1 size of the struct is accepted too. FH_ERR_NULL_POINTER,
 *  FH_ERR_STRUCT_SIZE, FH_ERR_CUDA. */
FH_API fh_status fh_pipeline_timings(fh_pipeline *pipeline, fh_timings *timings);

/** Number of named tensors (parameters, targets, state, outputs). FH_ERR_NULL_POINTER. */
FH_API fh_status fh_pipeline_num_tensors(const fh_pipeline *pipeline, uint32_t *count);

/** Describe tensor @p index in [0, count). FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE,
 *  FH_ERR_OUT_OF_RANGE. */
FH_API fh_status fh_pipeline_tensor_info(const fh_pipeline *pipeline, uint32_t index,
                                         fh_tensor_info *info);

/** Look a tensor up by name. FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE, FH_ERR_UNKNOWN_NAME. */
FH_API fh_status fh_pipeline_find_tensor(const fh_pipeline *pipeline, const char *name,
                                         fh_tensor_info *info);

/**
 * Copy tensor @p name into @p out, which holds @p count = rows * cols floats.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_UNKNOWN_NAME; FH_ERR_BUFFER_SIZE; FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_read_tensor(fh_pipeline *pipeline, const char *name, float *out,
                                         size_t count);

/**
 * Overwrite tensor @p name (a parameter, target or state tensor) from @p in of @p count floats.
 * Adam moments are left as they are.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_UNKNOWN_NAME (also for read-only tensors: step
 *         outputs, and the regime state when num_regimes = 1);
 *         FH_ERR_BUFFER_SIZE; FH_ERR_NON_FINITE; FH_ERR_BAD_VALUE (a spectral u of zero norm,
 *         a negative regime.s, a regime.scale outside [regime_min, regime_max] other than 1,
 *         its initial value (SPEC §5.5 step 8); and for a layer
 *         under spectral normalisation, a "q.Wk" or "sn.u.Wk" with which the power iteration's
 *         first product Wᵀu, rounded to float32, has a norm below 1e-12, or an all-zero
 *         "target.q.Wk": σ or σ̄ would vanish and every later step be skipped, SPEC §5.2);
 *         FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_write_tensor(fh_pipeline *pipeline, const char *name,
                                          const float *in, size_t count);

/**
 * Save everything a continued run needs (parameters, targets, Adam moments, spectral vectors,
 * regime state, step and act counters, the config) to @p path; the replay is not saved (see
 * fh_pipeline_save_ex()). A pipeline loaded from it continues bit-for-bit like this one when it
 * is fed the same batches.
 *
 * The file appears whole or not at all: it is written unnamed beside @p path (O_TMPFILE) and
 * given the name, replacing a regular file of that name, only after every byte is on disk
 * (fsync), so a save that fails or is killed leaves no partial or temporary file (on a file
 * system without O_TMPFILE a killed save can leave `path.fhtmp.PID.N`). A new file gets mode
 * 0666 less the umask, as fopen() gives; a file that replaces one keeps that file's permission
 * bits, as fopen() on it would. The state is streamed through a fixed 512 KiB of
 * buffers, whatever its size. A state with a NaN or infinity anywhere (which the divergence
 * guard of fh_pipeline_step() keeps out; write_tensor and load refuse them) is refused; nothing
 * is written then.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_NON_FINITE (naming the first such value, e.g.
 *         "adam_v of q.W1[3, 5] = inf"); FH_ERR_IO (also: @p path exists and is not a regular
 *         file: a device, FIFO, directory or symbolic link is never replaced);
 *         FH_ERR_OUT_OF_MEMORY (the 512 KiB of buffers); FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_save(fh_pipeline *pipeline, const char *path);

/** Bit of fh_pipeline_save_ex()'s flags: also save the replay (its valid rows, the number of
 *  rows inserted, and so the episode bookkeeping), so that a run that samples from it resumes
 *  bit-for-bit. The file then holds about replay_capacity * replay_envs transitions. */
#define FH_SAVE_REPLAY 1u

/**
 * fh_pipeline_save() with options: @p flags is 0 (exactly fh_pipeline_save(): a file that
 * foxhunt 0.1 also reads) or ::FH_SAVE_REPLAY (format 2, read by 0.2 and later). The replay's
 * valid rows are copied once (on CUDA from the device) and written from that copy.
 * @return as fh_pipeline_save(); also FH_ERR_BAD_VALUE (an unknown flag bit) and
 *         FH_ERR_UNSUPPORTED (FH_SAVE_REPLAY on a pipeline without a replay).
 */
FH_API fh_status fh_pipeline_save_ex(fh_pipeline *pipeline, const char *path, uint32_t flags);

/**
 * Load a checkpoint written by fh_pipeline_save() or fh_pipeline_save_ex() from a pipeline of
 * the same config (the backend, device and execution switches may differ). A checkpoint with
 * a replay needs a pipeline with the same replay_capacity and replay_envs and replaces its
 * replay; one without leaves the pipeline's replay as it is. On any error nothing changes. The
 * header (magic, format, config fingerprint, and the replay section's shape) is read first and
 * the rest only when the file's size is the one its header implies, so a large file that is no
 * checkpoint of a valid config is refused after reading a few hundred bytes.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_IO (also: not a regular file);
 *         FH_ERR_CHECKPOINT_TRUNCATED (this config's header, or the start of one, but the file
 *         ends early);
 *         FH_ERR_CHECKPOINT_CORRUPT (bad magic, format, checksum or size, a non-finite value,
 *         a negative Adam second moment (every step would be skipped), a state value that
 *         fh_pipeline_write_tensor() would refuse, a regime scale other
 *         than 1 with num_regimes = 1, a step, act or
 *         rows-inserted count of 2^63 or more, or replay rows that an insert would refuse);
 *         FH_ERR_CHECKPOINT_CONFIG (an intact checkpoint of another config, or a replay of
 *         another shape, or a replay and a pipeline without one); FH_ERR_OUT_OF_MEMORY;
 *         FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_load(fh_pipeline *pipeline, const char *path);

/** Bytes held by the pipeline, by category; on the CPU, the first step's caches and scratch
 *  count from that step on (before it, activations are fh_memory_plan()'s less those). The 0.1
 *  size of the report is accepted too.
 *  FH_ERR_NULL_POINTER, FH_ERR_STRUCT_SIZE. */
FH_API fh_status fh_pipeline_memory(const fh_pipeline *pipeline, fh_memory_report *report);

/**
 * Write the captured step graph as Graphviz dot (cudaGraphDebugDotPrint) to @p path.
 * Also done at creation when the environment variable FOXHUNT_DUMP_GRAPH names a path.
 * @return FH_OK; FH_ERR_NULL_POINTER; FH_ERR_NO_CUDA (CPU backend); FH_ERR_CUDA.
 */
FH_API fh_status fh_pipeline_dump_graph(fh_pipeline *pipeline, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* FOXHUNT_H */
