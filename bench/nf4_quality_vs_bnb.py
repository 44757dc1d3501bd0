#!/usr/bin/env python3
"""transformers + bitsandbytes' side of `bench_nf4 quality`: the same MedQA prompts (lm-eval layout),
next-token distribution of MODEL_DIR in float32 vs loaded with load_in_4bit (nf4, double
quantization, compute float32) on the CPU; prints mean KL(F32 || NF4) and top-1 agreement.
  python3 bench/nf4_quality_vs_bnb.py MODEL_DIR [N] [QUESTIONS_JSONL]
"""
import json, torch
from transformers import AutoTokenizer, AutoModelForCausalLM, BitsAndBytesConfig
import sys
p = sys.argv[1]
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 8
tok=AutoTokenizer.from_pretrained(p)
a=AutoModelForCausalLM.from_pretrained(p,dtype=torch.float32).eval()
q=BitsAndBytesConfig(load_in_4bit=True,bnb_4bit_quant_type='nf4',bnb_4bit_use_double_quant=True,bnb_4bit_compute_dtype=torch.float32)
b=AutoModelForCausalLM.from_pretrained(p,quantization_config=q,device_map='cpu',dtype=torch.float32).eval()
kls=[];agree=0;n=0
for line in open(sys.argv[3] if len(sys.argv) > 3 else '/work/shared/data/medqa/dev.jsonl'):
    if n >= limit: break
    d=json.loads(line)
    s="Question: "+d['question']+"\n"+"".join(f"{k}. {v}\n" for k,v in d['options'].items())+"Answer:"
    ids=tok(s,return_tensors='pt').input_ids
    with torch.no_grad():
        la=torch.log_softmax(a(ids).logits[0,-1].double(),-1); lb=torch.log_softmax(b(ids).logits[0,-1].double(),-1)
    kls.append(float((la.exp()*(la-lb)).sum())); agree+=int(la.argmax()==lb.argmax()); n+=1
print("transformers+bnb: prompts",n,"mean KL",sum(kls)/n,"agree",agree/n, [round(k,3) for k in kls])
