// Incremental decoding for generation: the model keeps each layer's keys and
// values (a KV cache), so the prompt is fed once and every later token costs
// one position's work instead of recomputing the whole prefix.
//
// Inference only, f32, one sequence, from the model's current parameters
// (read at each feed, so a decoder made before training steps sees them).
// Models offer one through Model::make_decoder(); generation falls back to
// full recomputation for a model that does not.
#pragma once
#include <cstdint>
#include <span>

namespace meshtrain {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Runs `tokens` at positions [position(), position() + n) and returns the
  // logits of the last of them (vocab_size() floats). Throws meshtrain::Error
  // when the cache would overflow capacity() or a token is outside the vocabulary.
  virtual const float* feed(std::span<const int32_t> tokens) = 0;
  virtual int position() const = 0;
  virtual int capacity() const = 0;  // the model's context, seq_len
  virtual void reset() = 0;          // forget the sequence, keep the buffers
};

}  // namespace meshtrain

namespace meshtrain {

// One query row against `len` cached positions, causal by construction:
// out (hd) = softmax(q . k_t / sqrt(hd)) . v_t over t < len, for keys and
// values stored `stride` floats apart. `scores` holds len floats.
void cached_attention(float* out, const float* q, const float* keys, const float* values,
                      int64_t stride, int64_t len, int64_t hd, float* scores);

}  // namespace meshtrain
