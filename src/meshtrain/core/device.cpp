#include "meshtrain/core/device.h"

#include <charconv>

#include "meshtrain/core/error.h"

namespace meshtrain {

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text == "guarded") return Device::guarded();
  if (text.starts_with("cuda:")) {
    const std::string_view n = text.substr(5);
    int index = -1;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && end == n.data() + n.size() && !n.empty() && index >= 0)
      return Device::cuda(index);
  }
  fail("unknown device \"{}\": cpu, cuda, cuda:N or guarded (the test device)", text);
}

}  // namespace meshtrain
