#!/usr/bin/env python3
"""lm-evaluation-harness's own view of medtune's task fixtures (tests/fixtures/eval/tasks).

Every fixture file is in one of the layouts its data set is published in. This script converts
each record, with Python's json/csv modules, to the schema of the Hugging Face data set lm-eval's
task YAML loads (GBaker/MedQA-USMLE-4-options-hf, openlifescienceai/medmcqa, bigbio/pubmed_qa
source, cais/mmlu), writes one task YAML per file that `include`s lm-eval's own YAML and only
swaps the data set for the local file (dataset_path: json, dataset_kwargs.data_files), and asks
lm-eval for the prompt, choices and target:

  prompts OUT.json      lm-eval's zero-shot context (description + doc_to_text: what it scores
                        after), doc_to_choice, doc_to_target for every record of every fixture file
                        -> tests/fixtures/eval/tasks/lm_eval_prompts.json
  run MODEL_DIR OUT.json lm_eval --model hf on the fixture files (CPU, float32): per record its
                        per-choice log-likelihoods and lm-eval's prediction (argmax), used by
                        tests/e2e/lm_eval_tasks.sh
  run-server BASE_URL MODEL OUT.json FILE...
                        the same through `medtune serve`: lm_eval --model local-completions with the
                        server's own tokenizer (tokenizer_backend=remote: /tokenize, /tokenizer_info),
                        used by tests/e2e/serve_lm_eval.sh

Needs lm-eval (pip install lm-eval) with torch and transformers.
"""
import csv
import glob
import json
import os
import sys
import tempfile

import lm_eval

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "eval", "tasks")
TASKS = ["medqa_4options", "medmcqa", "pubmedqa", "mmlu_anatomy", "mmlu_clinical_knowledge",
         "mmlu_college_biology", "mmlu_college_medicine", "mmlu_medical_genetics",
         "mmlu_professional_medicine"]
# lm-eval's own YAML for each task, relative to lm_eval/tasks.
TASK_YAML = {"medqa_4options": "medqa/medqa.yaml", "medmcqa": "medmcqa/medmcqa.yaml",
             "pubmedqa": "pubmedqa/pubmedqa.yaml"}
for t in TASKS:
    if t.startswith("mmlu_"):
        TASK_YAML[t] = f"mmlu/default/{t}.yaml"


def task_of(path):
    """medqa_4options_release.jsonl -> medqa_4options (the longest task name the file starts with)."""
    name = os.path.splitext(os.path.basename(path))[0]
    return max((t for t in TASKS if name == t or name.startswith(t + "_")), key=len)


def read_records(path):
    """The file's records in file order (the layouts of src/eval/task_records.h)."""
    if path.endswith(".csv"):
        rows = list(csv.reader(open(path, newline="", encoding="utf-8")))
        if rows and rows[0][0] == "question":
            return [dict(zip(rows[0], r)) for r in rows[1:]]
        return [dict(zip(["question", "A", "B", "C", "D", "answer"], r)) for r in rows]
    text = open(path, encoding="utf-8").read()
    if path.endswith(".json"):
        try:
            doc = json.loads(text)
            if isinstance(doc, list):
                return doc
            if isinstance(doc, dict) and all(isinstance(v, dict) for v in doc.values()):
                return list(doc.values())
        except json.JSONDecodeError:
            pass
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def cop_base(records):
    cops = {r["cop"] for r in records}
    return 0 if 0 in cops else 1


def to_lm_eval_schema(task, record, records):
    """One record in the schema of the data set lm-eval's YAML for `task` loads."""
    if task == "medqa_4options":
        if "sent1" in record:
            return record
        opts = record["options"]
        opts = [opts[k] for k in "ABCD"] if isinstance(opts, dict) else opts
        return {"sent1": record["question"], "sent2": "", **{f"ending{i}": o for i, o in enumerate(opts)},
                "label": "ABCD".index(record["answer_idx"])}
    if task == "medmcqa":
        return {**record, "cop": record["cop"] - cop_base(records)}
    if task == "pubmedqa":
        if "QUESTION" in record:
            return {"QUESTION": record["QUESTION"], "CONTEXTS": record["CONTEXTS"],
                    "final_decision": record["final_decision"]}
        return {"QUESTION": record["question"], "CONTEXTS": record["context"]["contexts"],
                "final_decision": record["final_decision"]}
    # mmlu
    if "choices" in record:
        return record
    return {"question": record["question"], "subject": task[len("mmlu_"):],
            "choices": [record[k] for k in "ABCD"], "answer": "ABCD".index(record["answer"])}


def write_task_dir(out_dir, files):
    """Per fixture file: docs in lm-eval's schema and a YAML naming it medtune_<n>_<task>."""
    tasks_root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    names = []
    for n, path in enumerate(files):
        task = task_of(path)
        records = read_records(path)
        docs = os.path.join(out_dir, f"docs_{n}.jsonl")
        with open(docs, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(to_lm_eval_schema(task, r, records)) + "\n")
        name = f"medtune_{n}_{task}"
        with open(os.path.join(out_dir, name + ".yaml"), "w", encoding="utf-8") as f:
            f.write(f"include: {os.path.join(tasks_root, TASK_YAML[task])}\n"
                    f"task: {name}\ntag: []\ndataset_path: json\ndataset_name: null\n"
                    f"dataset_kwargs:\n  data_files:\n    test: {docs}\n"
                    "training_split: null\nvalidation_split: null\ntest_split: test\nfewshot_split: null\n")
        names.append((name, task, path))
    return names


def fixture_files():
    files = glob.glob(os.path.join(FIXTURES, "*.jsonl")) + glob.glob(os.path.join(FIXTURES, "*.json")) + \
        glob.glob(os.path.join(FIXTURES, "*.csv"))
    return sorted(f for f in files if os.path.basename(f) != "lm_eval_prompts.json")


def load_tasks(task_dir, names):
    from lm_eval.tasks import TaskManager, get_task_dict
    tm = TaskManager(include_path=task_dir)
    return get_task_dict([n for n, _, _ in names], tm)


def prompts(out):
    files = fixture_files()
    with tempfile.TemporaryDirectory() as d:
        names = write_task_dir(d, files)
        task_dict = load_tasks(d, names)
        result = {"lm_eval_version": lm_eval.__version__, "files": {}}
        for name, task, path in names:
            t = task_dict[name]
            rows = []
            for doc in t.test_docs():
                rows.append({"context": t.fewshot_context(doc, 0), "choices": t.doc_to_choice(doc),
                             "target": t.doc_to_target(doc), "target_delimiter": t.config.target_delimiter})
            result["files"][os.path.basename(path)] = {"task": task, "records": rows}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")


def run(model_dir, out, files, server=None):
    from lm_eval import simple_evaluate
    with tempfile.TemporaryDirectory() as d:
        names = write_task_dir(d, files)
        from lm_eval.tasks import TaskManager
        if server:
            base_url, name = server
            model, model_args = "local-completions", (f"base_url={base_url}/v1/completions,model={name},"
                                                      "tokenizer_backend=remote,num_concurrent=1,max_retries=1")
        else:
            model, model_args = "hf", f"pretrained={model_dir},dtype=float32,device=cpu"
        res = simple_evaluate(model=model, model_args=model_args,
                              tasks=[n for n, _, _ in names], task_manager=TaskManager(include_path=d),
                              num_fewshot=0, batch_size=1, log_samples=True)
        result = {}
        for name, task, path in names:
            samples = sorted(res["samples"][name], key=lambda s: s["doc_id"])
            rows = []
            for s in samples:
                ll = [r[0][0] if isinstance(r[0], (list, tuple)) else r[0] for r in s["filtered_resps"]]
                rows.append({"loglikelihoods": ll, "pred": max(range(len(ll)), key=lambda i: ll[i]),
                             "target": s["target"], "acc": s["acc"]})
            result[os.path.basename(path)] = {"task": task, "records": rows,
                                             "acc": res["results"][name]["acc,none"]}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "prompts":
        prompts(sys.argv[2])
    elif len(sys.argv) >= 5 and sys.argv[1] == "run-server":
        run(None, sys.argv[4], sys.argv[5:], server=(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4:] or fixture_files())
    else:
        sys.exit(__doc__)
