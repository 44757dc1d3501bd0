#!/usr/bin/env python3
"""Writes tests/fixtures/axolotl/masks.json: axolotl's own token ids and loss labels (-100 where
untrained) for a few records of each dataset type medtune reads the axolotl way (alpaca,
completion, input_output, chat_template), so that tests/unit/train/test_dataset_formats.cpp can
check medtune's ids and masks equal them exactly.

It runs axolotl's real prompt strategies (not a re-implementation): AlpacaPromptTokenizingStrategy
with AlpacaPrompter (what `type: alpaca` builds in axolotl/utils/data/wrappers.py),
prompt_strategies.completion.load, prompt_strategies.input_output.load, and
prompt_strategies.chat_template's ChatTemplatePrompter + ChatTemplateStrategy with the parameters
its StrategyLoader passes. The tokenizer is the committed SmolLM2 one
(tests/fixtures/tokenizer/smollm2) and the chat template SmolLM2-Instruct's
(tests/fixtures/chat_templates/smollm2-instruct.jinja).

Setup (axolotl's full dependency list is large; these strategy modules need only a few):
  /work/venv-ref/bin/python -m venv --system-site-packages /work/venv-axolotl
  /work/venv-axolotl/bin/pip install axolotl --no-deps
  /work/venv-axolotl/bin/pip install datasets colorama addict
  # torch/transformers from the reference venv:
  echo /work/venv-ref/lib/python3.11/site-packages > /work/venv-axolotl/lib/python3.11/site-packages/zz_venv_ref.pth
Run from the repository root:  /work/venv-axolotl/bin/python tools/make_axolotl_mask_fixtures.py
"""

import json
import os
import sys

from importlib.metadata import version

from transformers import PreTrainedTokenizerFast

from axolotl.prompt_strategies import completion, input_output
from axolotl.prompt_strategies.chat_template import ChatTemplatePrompter, ChatTemplateStrategy
from axolotl.prompt_tokenizers import AlpacaPromptTokenizingStrategy
from axolotl.prompters import AlpacaPrompter
from axolotl.utils.dict import DictDefault

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK_DIR = os.path.join(ROOT, "tests/fixtures/tokenizer/smollm2")
TEMPLATE = os.path.join(ROOT, "tests/fixtures/chat_templates/smollm2-instruct.jinja")
OUT = os.path.join(ROOT, "tests/fixtures/axolotl/masks.json")


def tokenizer():
    with open(os.path.join(TOK_DIR, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    return PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(TOK_DIR, "tokenizer.json"),
        bos_token=cfg["bos_token"], eos_token=cfg["eos_token"], pad_token=cfg["pad_token"])


# Each case: a dataset entry (the keys both axolotl and medtune read), keys only axolotl needs
# (medtune infers ShareGPT's field names), the run settings, and records.
CASES = [
    {"name": "alpaca", "dataset": {"type": "alpaca"}, "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"instruction": "Name the first-line drug for uncomplicated hypertension in a 50-year-old.",
          "input": "", "output": "A thiazide diuretic such as chlorthalidone."},
         {"instruction": "Classify the rhythm.", "input": "Irregularly irregular, no P waves, rate 130.",
          "output": "Atrial fibrillation with rapid ventricular response."},
         {"instruction": "What does a positive Kernig sign suggest?", "output": "Meningeal irritation."},
     ]},
    {"name": "alpaca_train_on_inputs", "dataset": {"type": "alpaca"}, "train_on_inputs": True, "sequence_len": 512,
     "records": [
         {"instruction": "Give the antidote.", "input": "Acetaminophen overdose", "output": "N-acetylcysteine."},
     ]},
    {"name": "completion", "dataset": {"type": "completion"}, "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"text": "Sepsis is life-threatening organ dysfunction caused by a dysregulated host response to infection."},
     ]},
    {"name": "completion_field_chunked", "dataset": {"type": "completion", "field": "body"},
     "train_on_inputs": False, "sequence_len": 16,
     "records": [
         {"body": "Diabetic ketoacidosis presents with hyperglycemia, an anion gap metabolic acidosis and "
                  "ketonemia; treatment starts with fluids, insulin and potassium replacement."},
     ]},
    {"name": "input_output", "dataset": {"type": "input_output"}, "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"segments": [{"label": False, "text": "<|im_start|>user\nWhat causes scurvy?<|im_end|>\n"},
                       {"label": True, "text": "<|im_start|>assistant\nVitamin C deficiency.<|im_end|>\n"},
                       {"label": False, "text": "<|im_start|>user\nAnd rickets?<|im_end|>\n"},
                       {"label": True, "text": "<|im_start|>assistant\nVitamin D deficiency.<|im_end|>\n"}]},
     ]},
    {"name": "input_output_train_on_inputs", "dataset": {"type": "input_output"}, "train_on_inputs": True,
     "sequence_len": 512,
     "records": [
         {"segments": [{"label": False, "text": "Q: normal adult resting heart rate?"},
                       {"label": True, "text": " A: 60-100 beats per minute."}]},
     ]},
    {"name": "chat_template_messages", "dataset": {"type": "chat_template"}, "train_on_inputs": False,
     "sequence_len": 512,
     "records": [
         {"messages": [{"role": "system", "content": "You are a careful clinician."},
                       {"role": "user", "content": "What is the first step in anaphylaxis?"},
                       {"role": "assistant", "content": "Intramuscular epinephrine."},
                       {"role": "user", "content": "Dose for an adult?"},
                       {"role": "assistant", "content": "0.5 mg of 1 mg/mL into the anterolateral thigh."}]},
         {"messages": [{"role": "user", "content": "Define tachycardia."},
                       {"role": "assistant", "content": "A heart rate above 100 beats per minute."}]},
         {"system": "Answer in one word.",
          "messages": [{"role": "user", "content": "Vitamin deficient in pellagra?"},
                       {"role": "assistant", "content": "Niacin."}]},
     ]},
    {"name": "chat_template_sharegpt", "dataset": {"type": "chat_template"},
     "axolotl_only": {"field_messages": "conversations",
                      "message_property_mappings": {"role": "from", "content": "value"}},
     "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"conversations": [{"from": "human", "value": "Most common cause of community-acquired pneumonia?"},
                            {"from": "gpt", "value": "Streptococcus pneumoniae."},
                            {"from": "human", "value": "Empiric outpatient therapy?"},
                            {"from": "gpt", "value": "Amoxicillin, or doxycycline."}]},
     ]},
    {"name": "chat_template_mapped_roles_eos_all", "dataset": {
        "type": "chat_template", "field_messages": "dialog",
        "message_property_mappings": {"role": "speaker", "content": "text"},
        "roles_to_train": ["user", "assistant"], "train_on_eos": "all"},
     "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"dialog": [{"speaker": "system", "text": "Be brief."},
                     {"speaker": "user", "text": "Normal serum sodium?"},
                     {"speaker": "assistant", "text": "135-145 mmol/L."}]},
     ]},
    {"name": "chat_template_eos_last", "dataset": {"type": "chat_template", "train_on_eos": "last"},
     "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                       {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}]},
     ]},
    {"name": "chat_template_eos_none", "dataset": {"type": "chat_template", "train_on_eos": "none"},
     "train_on_inputs": False, "sequence_len": 512,
     "records": [
         {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]},
     ]},
    {"name": "chat_template_train_on_inputs", "dataset": {"type": "chat_template"}, "train_on_inputs": True,
     "sequence_len": 512,
     "records": [
         {"messages": [{"role": "user", "content": "Antidote for heparin?"},
                       {"role": "assistant", "content": "Protamine sulfate."}]},
     ]},
]


def strategy(case, tok, template):
    ds = dict(case["dataset"])
    ds.update(case.get("axolotl_only", {}))
    cfg = DictDefault({"train_on_inputs": case["train_on_inputs"], "sequence_len": case["sequence_len"]})
    kind = ds["type"]
    if kind == "alpaca":  # axolotl/utils/data/wrappers.py: _handle_alpaca_dataset(None, ...)
        return AlpacaPromptTokenizingStrategy(AlpacaPrompter(None), tok, cfg.train_on_inputs, cfg.sequence_len)
    if kind == "completion":
        return completion.load(tok, cfg, ds)
    if kind == "input_output":
        return input_output.load(tok, cfg)
    if kind == "chat_template":  # the parameters StrategyLoader.__call__ passes
        prompter = ChatTemplatePrompter(
            tok, template, max_length=cfg.sequence_len + 1,
            message_property_mappings=ds.get("message_property_mappings", {}),
            field_messages=ds.get("field_messages", "messages"))
        return ChatTemplateStrategy(
            prompter, tok, cfg.train_on_inputs, cfg.sequence_len,
            roles_to_train=ds.get("roles_to_train", ["assistant"]),
            train_on_eos=ds.get("train_on_eos", "turn"))
    raise ValueError(kind)


def rows(strat, kind, record):
    if kind == "completion":  # batched: columns of lists, one row per sequence_len piece
        out = strat.tokenize_prompt({k: [v] for k, v in record.items()})
        return [{"input_ids": i, "labels": l} for i, l in zip(out["input_ids"], out["labels"])]
    out = strat.tokenize_prompt(record)
    return [{"input_ids": list(out["input_ids"]), "labels": list(out["labels"])}]


def main():
    tok = tokenizer()
    with open(TEMPLATE) as f:
        template = f.read()
    cases = []
    for case in CASES:
        strat = strategy(case, tok, template)
        records = [{"record": r, "examples": rows(strat, case["dataset"]["type"], r)} for r in case["records"]]
        cases.append({"name": case["name"], "dataset": case["dataset"], "train_on_inputs": case["train_on_inputs"],
                      "sequence_len": case["sequence_len"], "records": records})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "tools/make_axolotl_mask_fixtures.py",
                   "axolotl": version("axolotl"), "transformers": version("transformers"),
                   "tokenizer": "tests/fixtures/tokenizer/smollm2",
                   "chat_template": "tests/fixtures/chat_templates/smollm2-instruct.jinja",
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {sum(len(c['records']) for c in cases)} records in {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
