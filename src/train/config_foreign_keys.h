// The keys a training config may hold that medtune does not implement: axolotl's (each warned
// about or refused, with the reason), the names TRL and transformers use for medtune's keys, and
// axolotl's optimizer names. Internal to train_config.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "train/config_value.h"

namespace medtune::train::config {

// axolotl keys medtune does not implement. kWarn: harmless here (the result is the same), so a set
// value earns a warning; kReject: a set value would change the result, so it is an error. Unset
// values (null, false, empty) are always fine: axolotl's example configs list many keys empty.
enum class Effect { kWarn, kReject };
struct ForeignKey {
  std::string_view name;
  Effect effect;
  std::string_view why;
};

const std::vector<ForeignKey>& foreign_keys();

// "unknown key 'lora_rank'; did you mean 'lora_r'?": the guess from the TRL / transformers aliases,
// else the closest of `known` (every key medtune implements), else of the foreign keys.
std::string unknown_key_message(const std::string& key, std::vector<std::string_view> known);

// axolotl's `optimizer`: the AdamW variants that do the same fp32 update as medtune's are fine.
void check_optimizer(const Entry& e, std::vector<std::string>& warnings);

}  // namespace medtune::train::config
