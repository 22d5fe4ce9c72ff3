// The training configuration: a plain struct with typed fields and defaults.
// Every key is documented in docs/CONFIG.md; the JSON form uses the same names
// ("train.lr" is TrainConfig::train.lr). Load one with load_config()
// (config_loader.h).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace meshtrain {

struct ModelSection {
  // The model family: "gpt", "llama" or "resnet"; "" = the preset's (GPT without one).
  std::string family;
  std::string preset = "char-6L";  // "" = none: give every dimension below
  // 0 = take the preset's value; set to override one dimension of a preset.
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int seq_len = 0;
  int vocab_size = 0;
  // Llama only (0 = the preset's): k/v heads (grouped-query attention), the
  // SwiGLU width, the rotary base.
  int n_kv_head = 0;
  int ffn_hidden = 0;
  double rope_theta = 0;
  // Image models with batch norm: its statistics over the whole data-parallel
  // batch (synchronized batch norm) instead of each rank's part.
  bool sync_bn = false;
  // Image models (ResNet), 0 = the preset's: the classes, the square input's
  // size and channels, the first stage's width.
  int num_classes = 0;
  int image_size = 0;
  int in_channels = 0;
  int width = 0;
};

struct DataSection {
  std::string train;  // glob of training shards, e.g. "data/fortunes/train_*.bin"
  std::string val;    // glob of validation shards ("" = no evaluation)
  int workers = 2;    // image decoding threads per rank (image shards only)
};

struct TrainSection {
  int micro_batch = 8;     // sequences per rank per forward/backward
  int grad_accum = 1;      // micro-batches accumulated per optimizer step
  int64_t steps = 1000;
  double lr = 6e-4;        // peak learning rate
  double min_lr_ratio = 0.1;  // final lr = lr * min_lr_ratio (cosine, linear)
  int64_t warmup = 100;    // linear warmup steps
  std::string schedule = "cosine";  // cosine | linear | constant
  std::string optimizer = "adamw";  // adamw | sgd | lars | lamb (optim/optimizer.h)
  double weight_decay = 0.1;
  double momentum = 0.9;       // sgd, lars
  bool nesterov = false;       // sgd, lars
  double trust_coefficient = 0.001;  // lars: eta
  double trust_clip = 10;      // lamb: the trust ratio's upper bound; 0 = none
  bool exclude_norms_and_biases = true;  // from weight decay and (lars, lamb) the trust ratio
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double clip = 1.0;       // global gradient-norm clip; 0 = off
  int64_t eval_every = 100;  // 0 = never
  int eval_batches = 20;
  uint64_t seed = 1;
  int threads = 0;         // compute threads per rank; 0 = auto
  int64_t log_every = 1;
  int64_t sample_every = 0;  // 0 = never
  double max_minutes = 0;    // time budget: the run's length from its measured step time; 0 = off
  int64_t save_every = 0;    // write the model to `out` every N steps; 0 = at the end only
  // Scale lr for a global batch other than the one it was tuned at:
  // none | linear (lr * G / base) | sqrt (lr * sqrt(G / base)), G in sequences.
  std::string lr_scaling = "none";
  int64_t lr_base_batch = 0;  // the global batch (sequences) lr was tuned at; needed unless none
};

// Local SGD / DiLoCo (parallel/local_sgd.h).
struct LocalSgdSection {
  int64_t sync_every = 0;  // H local steps between averages; 0 = off
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
  bool nesterov = true;
};

// Parameter-server training (parallel/parameter_server.h).
struct ParameterServerSection {
  bool enabled = false;
  int64_t staleness = 2;  // updates a gradient may land late; 0 = synchronous
  bool staleness_lr = false;  // lr / mean staleness for stale updates
};

struct ParallelSection {
  int dp = 0;  // data-parallel ranks; 0 = "auto" (world size / (tp * pp))
  int tp = 1;
  int pp = 1;
  std::string schedule = "1f1b";  // pipeline schedule: gpipe | 1f1b | interleaved (plan/pipeline_schedule.h)
  int chunks = 1;  // model chunks (virtual stages) per pipeline rank; interleaved needs >= 2
  std::string stage_layers;  // layers per virtual stage, "3,3"; empty = balanced by cost
  double bucket_mb = 25;       // data-parallel gradient bucket size (MiB)
  double first_bucket_mb = 1;  // the first bucket, small so reduction starts early (MiB)
  bool sequence_parallel = false;  // tp > 1: norms and residual stream split over tp too
  LocalSgdSection local_sgd;
  ParameterServerSection parameter_server;
};

struct ZeroSection {
  int stage = 0;  // 0 (off), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)
  // Stage 3: parameter units with fewer elements stay resident (replicated).
  int64_t persist_threshold = 100000;
};

// LoRA fine-tuning (nn/lora_spec.h): adapters on a frozen base.
struct LoraSection {
  int rank = 0;              // 0 = off (full fine-tuning)
  double alpha = 16;         // adapter output scale alpha / rank
  std::string targets = "all";  // "all" or matrix names, e.g. "q_proj,v_proj"
  // "fp32": the frozen base keeps its f32 values (beside the 16-bit copy a
  // mixed-precision run computes with); "bf16" / "fp16" (= precision): only
  // the 16-bit copy of its matrices is held.
  std::string base_dtype = "fp32";
};

// Optimizer state on disk (optim/offloaded_optimizer.h; OffloadConfig).
struct OffloadSection {
  std::string optimizer_state = "none";  // none | disk
  std::string path;        // disk: directory of the state file ("" = $TMPDIR or /tmp)
  double unit_mb = 32;     // optimizer state per unit
  int prefetch = 2;        // units read ahead of the one being updated
};

struct MemorySection {
  double limit_mb = 0;  // per-rank limit; a configuration predicted above it is refused; 0 = none
};

// fp16 dynamic loss scaling (precision = "fp16" only; optim/loss_scaler.h).
struct LossScaleSection {
  double initial = 65536;          // 2^16
  int64_t growth_interval = 2000;  // good steps in a row before the scale doubles
  int hysteresis = 1;              // overflows tolerated before the scale is halved
  double min = 1;                  // the scale never goes below this
  int64_t max_consecutive_skips = 50;  // overflowing steps in a row before training stops
};

struct CheckpointSection {
  std::string dir;      // "" = <telemetry.dir>/ckpt
  int64_t every = 0;    // steps between checkpoints; 0 = none
  int keep_last = 3;    // 0 = keep all
  int64_t milestone_every = 0;  // also keep steps that are multiples of this; 0 = none
  bool async = true;    // write in the background
  int64_t memory_every = 0;  // steps between buddy copies in memory; 0 = none
  std::string memory_dir = "/dev/shm";  // node-local memory (a tmpfs) for them
  std::string resume = "auto";  // auto | never | a checkpoint directory (step dir or root)
};

struct TelemetrySection {
  std::string dir;      // "" = runs/<run_name>
  bool trace = false;   // Chrome/Perfetto trace
  double price_per_device_hour = 0.0;  // for cost estimates; 0 = not reported
  double peak_gflops = 0.0;  // MFU's denominator per rank; 0 = measured at start-up
};

// Lossy gradient compression with error feedback (parallel/gradient_codec.h).
struct CompressionSection {
  std::string type = "none";  // none | powersgd | topk | sign
  int rank = 4;               // powersgd: rank of the factors
  double ratio = 0.01;        // topk: fraction of each bucket sent
  int64_t warmup_steps = 0;   // uncompressed steps first
  bool error_feedback = true;
};

struct CommSection {
  std::string transport = "auto";  // auto | shm | mpi | nccl | tcp
  double timeout_s = 300;          // a collective waiting longer fails the job
  std::string grad_dtype = "f32";  // f32 | bf16: wire format of the data-parallel gradient reduction
  CompressionSection compression;
};

struct TrainConfig {
  ModelSection model;
  std::string init_from;  // "" = random init; else safetensors / llm.c model / checkpoint dir
  DataSection data;
  TrainSection train;
  ParallelSection parallel;
  ZeroSection zero;
  LoraSection lora;
  MemorySection memory;
  OffloadSection offload;
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  std::string device = "cpu";      // cpu | cuda | cuda:N
  LossScaleSection loss_scale;     // fp16 only
  std::string recompute = "none";  // none | full | every:K | selective
  bool deterministic = false;
  CheckpointSection checkpoint;
  TelemetrySection telemetry;
  CommSection comm;
  std::string run_name = "default";
  std::string out;  // "" = <telemetry.dir>/model.safetensors
};

// The configuration as JSON, every key present (parallel.dp 0 prints "auto").
// load_config() fills the derived paths, so its result prints them resolved.
nlohmann::json resolved_json(const TrainConfig& config);
// Pretty, in the documented key order, for "resolved configuration" logs.
std::string to_string(const TrainConfig& config);

// Fills "" derived paths: telemetry.dir, checkpoint.dir, out.
void resolve_derived_paths(TrainConfig& config);

// The learning rate after train.lr_scaling for a global batch of
// `global_batch` sequences (micro_batch x dp x grad_accum).
double scaled_lr(const TrainSection& train, int64_t global_batch);

// Recompute policy parsed from the `recompute` string.
struct RecomputePolicy {
  enum class Kind { None, Full, EveryK, Selective } kind = Kind::None;
  int every = 0;  // K for EveryK: recompute every K-th layer
};
// Throws meshtrain::Error for anything but none | full | every:K (K >= 1) | selective.
RecomputePolicy parse_recompute(const std::string& value);

}  // namespace meshtrain
