// Reading a checkpoint written by any number of ranks into any other layout:
// read(buffer, range, dst) fills a destination element range of a flat buffer
// by reading, from each shard file that overlaps it, exactly the bytes of the
// overlap (SafetensorsFile::read_range). With verification on (the default),
// each shard file a read touches is checksummed once in full first, so a
// flipped byte anywhere in it is an Error naming the file.
#pragma once
#include <memory>
#include <string>

#include "meshtrain/ckpt/checkpoint_index.h"

namespace meshtrain::ckpt {

struct ReadOptions {
  bool verify = true;  // CRC32C of every shard file before its first read
};

class CheckpointReader {
 public:
  // Reads and validates index.json and checks that every listed file exists
  // with its recorded size (a missing or truncated shard fails here).
  static CheckpointReader open(const std::string& step_dir, ReadOptions options = {});

  const std::string& dir() const;
  const CheckpointIndex& index() const;
  bool has_buffer(const std::string& name) const;

  // dst receives elements [range.begin, range.end) of buffer `name` (in the
  // saved dtype); range must lie inside the buffer.
  void read(const std::string& name, ElemRange range, void* dst) const;

  // Checksums every file (inspect); throws naming the first bad one.
  void verify_all() const;
  // Throws "... is from another model: n_layer 2 (checkpoint) vs 4 (model)".
  void check_model(const ModelSpec& model) const;
  // `rank`'s saved state; a rank beyond the saved world gets rank 0's data
  // position and a null RNG blob (the trainer reseeds it).
  RankState rank_state(int rank) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace meshtrain::ckpt
