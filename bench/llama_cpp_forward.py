# llama-cpp-python's prompt and decode tokens/s on a GGUF, as bench_forward measures medtune's:
# a prompt of P tokens (ids 1..P cycled from a fixed text), then D greedy decode tokens, T threads.
import sys, time, llama_cpp
model, P, D, T, R = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = llama_cpp.Llama(model_path=model, n_ctx=P + D + 8, n_threads=T, n_threads_batch=T, n_batch=P, verbose=False)
sentence = "The patient presents with fever, cough and shortness of breath. "
# Enough repeats for P tokens (13 tokens a sentence: the 64 repeats of before covered about 830):
# with fewer ids than P, P / time would overstate llama.cpp's prompt speed.
text = sentence * max(64, P // 8 + 1)
ids = llm.tokenize(text.encode(), add_bos=True)[:P]
if len(ids) != P:
    sys.exit(f"llama_cpp_forward.py: the prompt text gave {len(ids)} tokens, not {P}")
for r in range(R):
    llm.reset()
    t0 = time.perf_counter(); llm.eval(ids); t1 = time.perf_counter()
    n = 0
    for tok in llm.generate([], temp=0.0, reset=False):
        n += 1
        if n == D: break
    t2 = time.perf_counter()
    print(f"round {r+1}: prompt {P / (t1 - t0):.1f} tok/s, decode {D / (t2 - t1):.1f} tok/s", flush=True)
