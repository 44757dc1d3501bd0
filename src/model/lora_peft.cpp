#include "model/lora_peft.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace medtune::model {

LoraWeights lora_from_peft(const io::PeftAdapter& adapter, const ModelConfig& c,
                           const std::string& origin) {
  LoraWeights w;
  w.config.r = adapter.spec.r;
  w.config.alpha = adapter.spec.alpha;
  w.config.dropout = adapter.spec.dropout;
  w.config.use_rslora = adapter.spec.use_rslora;
  for (const auto& t : adapter.spec.target_modules) w.config.targets.push_back(proj_from_name(t));
  w.scaling = static_cast<float>(adapter.scaling());
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (const auto& pair : adapter.pairs) {
    // A NaN in an adapter turns every output of its layer into NaN: refused by name here rather
    // than found as an empty generation or a NaN log-probability.
    for (const auto& [which, values] : {std::pair{"lora_A", &pair.A}, std::pair{"lora_B", &pair.B}}) {
      const auto bad = std::find_if(values->begin(), values->end(), [](float x) { return !std::isfinite(x); });
      if (bad != values->end())
        throw BadInput(origin + ": module '" + pair.module + "': " + which + " holds " +
                       (std::isnan(*bad) ? "NaN" : "Inf") + " at element " + std::to_string(bad - values->begin()) +
                       " (an adapter from a run that diverged?)");
    }
    bool bound = false;
    for (int64_t l = 0; l < c.num_hidden_layers && !bound; ++l)
      for (int p = 0; p < kNumProj && !bound; ++p) {
        if (proj_module_path(l, static_cast<Proj>(p)) != pair.module) continue;
        auto [out, in] = proj_shape(c, static_cast<Proj>(p));
        if (pair.in != in || pair.out != out)
          throw BadInput(origin + ": module '" + pair.module + "' has lora_A (" +
                         std::to_string(pair.r) + ", " + std::to_string(pair.in) + ") and lora_B (" +
                         std::to_string(pair.out) + ", " + std::to_string(pair.r) +
                         "), but the base model's projection is (" + std::to_string(out) + ", " +
                         std::to_string(in) + ")");
        LoraLinear& ll = w.at(l, static_cast<Proj>(p));
        ll.r = pair.r;
        ll.in = in;
        ll.out = out;
        ll.A = pair.A;
        ll.B = pair.B;
        ll.dA.assign(ll.A.size(), 0.0f);
        ll.dB.assign(ll.B.size(), 0.0f);
        bound = true;
      }
    if (!bound)
      throw BadInput(origin + ": module '" + pair.module + "' is not a projection of this model (" +
                     std::to_string(c.num_hidden_layers) + " layers)");
  }
  return w;
}

io::PeftAdapter lora_to_peft(const LoraWeights& lora, const std::string& base_model_name) {
  io::PeftAdapter a;
  a.spec.r = lora.config.r;
  a.spec.alpha = lora.config.alpha;
  a.spec.dropout = lora.config.dropout;
  a.spec.use_rslora = lora.config.use_rslora;
  a.spec.base_model_name_or_path = base_model_name;
  for (Proj p : lora.config.targets) a.spec.target_modules.push_back(proj_name(p));
  for (size_t l = 0; l < lora.layers.size(); ++l)
    for (int p = 0; p < kNumProj; ++p) {
      const LoraLinear& ll = lora.layers[l][static_cast<size_t>(p)];
      if (!ll.enabled()) continue;
      io::LoraTensorPair pair;
      pair.module = proj_module_path(static_cast<int64_t>(l), static_cast<Proj>(p));
      pair.A = ll.A;
      pair.B = ll.B;
      pair.r = ll.r;
      pair.in = ll.in;
      pair.out = ll.out;
      a.pairs.push_back(std::move(pair));
    }
  return a;
}

}  // namespace medtune::model
