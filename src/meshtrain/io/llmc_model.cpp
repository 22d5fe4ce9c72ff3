#include "meshtrain/io/llmc_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"
#include "meshtrain/io/atomic_file.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/model_file_util.h"

namespace meshtrain {

using namespace io_detail;

namespace {

constexpr int kVersionF32 = 3, kVersionBF16 = 5;
constexpr int64_t kHeaderBytes = 256 * 4;
using Header = std::array<int32_t, 256>;

// llm.c stores each kind of tensor for all layers together (tensor-major), in
// this order; our buffer is layer-major, so each slice goes to its layer's view.
using LayerField = Tensor GPTLayerParams::*;
constexpr LayerField kLayerFields[] = {
    &GPTLayerParams::ln1w,     &GPTLayerParams::ln1b, &GPTLayerParams::qkvw,
    &GPTLayerParams::qkvb,     &GPTLayerParams::attprojw, &GPTLayerParams::attprojb,
    &GPTLayerParams::ln2w,     &GPTLayerParams::ln2b, &GPTLayerParams::fcw,
    &GPTLayerParams::fcb,      &GPTLayerParams::fcprojw,  &GPTLayerParams::fcprojb};

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    MT_CHECK(fd_ >= 0, "cannot open model file {}: {}", path, std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  int get() const { return fd_; }
  int64_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  }

 private:
  int fd_;
};

bool pread_all(int fd, void* dst, size_t bytes, int64_t offset) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

struct LlmcFile {
  std::string path;
  Fd fd;
  Header hdr{};
  GPTConfig cfg;
  size_t elem_size = 4;

  explicit LlmcFile(const std::string& p) : path(p), fd(p) {
    const int64_t size = fd.size();
    MT_CHECK(size >= kHeaderBytes && pread_all(fd.get(), hdr.data(), kHeaderBytes, 0),
             "llm.c model file {}: shorter than its {}-byte header ({} bytes)", path,
             kHeaderBytes, size);
    MT_CHECK(hdr[0] == kLlmcModelMagic, "llm.c model file {}: bad magic {} (expected {})", path,
             hdr[0], kLlmcModelMagic);
    MT_CHECK(hdr[1] == kVersionF32 || hdr[1] == kVersionBF16,
             "llm.c model file {}: version {} is not supported (3 = f32, 5 = bf16)", path, hdr[1]);
    elem_size = hdr[1] == kVersionF32 ? 4 : 2;
    cfg.seq_len = hdr[2];
    cfg.vocab_size = hdr[3];
    cfg.n_layer = hdr[4];
    cfg.n_head = hdr[5];
    cfg.n_embd = hdr[6];
    cfg.padded_vocab = hdr[7];
    try {
      cfg.validate();
    } catch (const Error& e) {
      fail("llm.c model file {}: header describes an invalid model: {}", path, e.what());
    }
    const int64_t want = kHeaderBytes + cfg.num_params() * static_cast<int64_t>(elem_size);
    MT_CHECK(size >= want, "llm.c model file {}: truncated: {} needs {} bytes but the file has {}",
             path, cfg.describe(), want, size);
    MT_CHECK(size == want, "llm.c model file {}: {} extra bytes after the parameters of {}", path,
             size - want, cfg.describe());
  }

  // Reads `count` stored elements at element position `pos` into dst (count elements).
  void read(int64_t pos, int64_t count, const Tensor& dst) const {
    const int64_t off = kHeaderBytes + pos * static_cast<int64_t>(elem_size);
    const size_t bytes = static_cast<size_t>(count) * elem_size;
    bool ok;
    if (elem_size == 4 && dst.dtype() == DType::F32) {
      ok = pread_all(fd.get(), dst.raw(), bytes, off);
    } else {
      Tensor tmp = Tensor::zeros({count}, elem_size == 4 ? DType::F32 : DType::BF16);
      ok = pread_all(fd.get(), tmp.raw(), bytes, off);
      Tensor(dst).copy_from(tmp);
    }
    MT_CHECK(ok, "llm.c model file {}: read of {} bytes at {} failed", path, bytes, off);
  }
};

}  // namespace

bool is_llmc_model(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  int32_t magic = 0;
  bool ok = pread_all(fd, &magic, 4, 0);
  ::close(fd);
  return ok && magic == kLlmcModelMagic;
}

GPTConfig read_llmc_config(const std::string& path) { return LlmcFile(path).cfg; }

void load_llmc_model(const std::string& path, const GPTParams& dst, const GPTConfig& cfg) {
  LlmcFile f(path);
  check_same_config(path, f.cfg, cfg, /*check_padded_vocab=*/false);
  const int64_t C = cfg.n_embd;
  int64_t pos = 0;
  // wte: keep the real vocabulary rows; our padding rows are zeroed.
  const int64_t real = int64_t{cfg.vocab_size} * C;
  f.read(pos, real, dst.wte.slice_flat(0, real));
  dst.wte.slice_flat(real, dst.wte.numel() - real).zero_();
  pos += int64_t{f.cfg.padded_vocab} * C;
  f.read(pos, dst.wpe.numel(), dst.wpe);
  pos += dst.wpe.numel();
  for (LayerField field : kLayerFields) {
    for (const auto& layer : dst.layers) {
      const Tensor& t = layer.*field;
      f.read(pos, t.numel(), t);
      pos += t.numel();
    }
  }
  for (const Tensor* t : {&dst.lnfw, &dst.lnfb}) {
    f.read(pos, t->numel(), *t);
    pos += t->numel();
  }
}

void write_llmc_model(const std::string& path, const GPTParams& params, const GPTConfig& cfg) {
  MT_CHECK(params.flat.numel() == cfg.num_params(),
           "writing {}: parameter buffer has {} elements but the config needs {}", path,
           params.flat.numel(), cfg.num_params());
  Header hdr{};
  hdr[0] = kLlmcModelMagic;
  hdr[1] = kVersionF32;
  hdr[2] = cfg.seq_len;
  hdr[3] = cfg.vocab_size;
  hdr[4] = cfg.n_layer;
  hdr[5] = cfg.n_head;
  hdr[6] = cfg.n_embd;
  hdr[7] = cfg.padded_vocab;
  AtomicFileWriter w(path);
  w.write(hdr.data(), kHeaderBytes);
  auto put = [&](const Tensor& t) {
    Tensor f = as_f32(t);
    w.write(f.raw(), f.nbytes());
  };
  put(params.wte);
  put(params.wpe);
  for (LayerField field : kLayerFields)
    for (const auto& layer : params.layers) put(layer.*field);
  put(params.lnfw);
  put(params.lnfb);
  w.commit();
}

}  // namespace meshtrain
