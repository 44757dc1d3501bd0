#!/usr/bin/env python3
"""Generates the chat-template parity fixtures under tests/fixtures/chat_templates/.

Two steps, both run once by hand; the outputs are committed so tests need no Python:

1. Collect real chat templates into <name>.jinja (only when the sources are given):

     pip download --no-deps --no-binary :all: llama-cpp-python   # ships llama.cpp's templates
     tar xzf llama_cpp_python-*.tar.gz
     python3 tools/make_chat_template_fixtures.py \
         --llama-cpp llama_cpp_python-*/vendor/llama.cpp \
         --smollm2-gguf SmolLM2-135M-Instruct.Q4_1.gguf          # read with gguf-py

   A few canonical templates (Llama-2-chat, Llama-3-Instruct, Qwen2-Instruct) are written out
   below verbatim from their models' tokenizer_config.json.

2. Render every <name>.jinja with transformers' own code (render_jinja_template, the function
   apply_chat_template calls, so its jinja2 environment, tojson and raise_exception are the
   reference) for a set of conversations, and write cases.json. Also renders features.json:
   small templates exercising one Jinja feature each, with jinja2 configured exactly as
   transformers configures it.

     python3 tools/make_chat_template_fixtures.py

Needs: transformers (for render_jinja_template), jinja2; gguf only for step 1.
"""

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "chat_templates"

# Verbatim from meta-llama/Llama-2-7b-chat-hf tokenizer_config.json (JSON-decoded).
LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)

# Verbatim from meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json.
LLAMA3_INSTRUCT = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# Verbatim from Qwen/Qwen2-7B-Instruct tokenizer_config.json.
QWEN2_INSTRUCT = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# name -> file under llama.cpp's models/templates/
LLAMA_CPP_FILES = {
    "llama-3.1-instruct": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama-3.3-instruct": "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "qwen2.5-instruct": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "mistral-nemo-instruct-2407": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "gemma-2-it": "google-gemma-2-2b-it.jinja",
    "phi-3.5-mini-instruct": "microsoft-Phi-3.5-mini-instruct.jinja",
    "deepseek-r1-distill-llama": "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "smollm3": "HuggingFaceTB-SmolLM3-3B.jinja",
    "hermes-3-llama-3.1": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
}

# name -> the test case name in llama.cpp's tests/test-chat-template.cpp
LLAMA_CPP_TESTS = {
    "mistral-7b-instruct-v0.1": "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)",
    "mistral-7b-instruct-v0.2": "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)",
    "mistral-7b-instruct-v0.3": "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at start)",
    "gemma-7b-it": "google/gemma-7b-it",
    "deepseek-coder-33b-instruct": "deepseek-ai/deepseek-coder-33b-instruct",
    "openchat-3.5": "openchat/openchat-3.5-0106",
    "granite-3.0-instruct": "ibm-granite/granite-3.0-8b-instruct",
    "command-r-plus": "CohereForAI/c4ai-command-r-plus",
}

SPECIAL_TOKENS = {
    "llama-3": ("<|begin_of_text|>", "<|eot_id|>"),
    "smollm": ("<|im_start|>", "<|im_end|>"),
    "qwen": ("<|endoftext|>", "<|im_end|>"),
    "gemma": ("<bos>", "<eos>"),
    "deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}


def special_tokens(name):
    for prefix, tokens in SPECIAL_TOKENS.items():
        if name.startswith(prefix):
            return tokens
    return ("<s>", "</s>")


def llama_cpp_test_templates(path):
    text = (path / "tests" / "test-chat-template.cpp").read_text()
    found = {}
    pattern = re.compile(
        r'/\* \.name= \*/\s*"((?:[^"\\]|\\.)*)",\s*(?://[^\n]*\n\s*)*/\* \.template_str= \*/\s*(?:U8C\()?("(?:[^"\\]|\\.)*")'
    )
    for m in pattern.finditer(text):
        found[ast.literal_eval('"' + m.group(1) + '"')] = ast.literal_eval(m.group(2))
    return found


def collect(args):
    OUT.mkdir(parents=True, exist_ok=True)
    templates = {
        "llama-2-chat": LLAMA2_CHAT,
        "llama-3-instruct": LLAMA3_INSTRUCT,
        "qwen2-instruct": QWEN2_INSTRUCT,
    }
    if args.llama_cpp:
        root = Path(args.llama_cpp)
        for name, file in LLAMA_CPP_FILES.items():
            templates[name] = (root / "models" / "templates" / file).read_text()
        tests = llama_cpp_test_templates(root)
        for name, test in LLAMA_CPP_TESTS.items():
            templates[name] = tests[test]
    if args.smollm2_gguf:
        import gguf

        reader = gguf.GGUFReader(args.smollm2_gguf)
        field = reader.fields["tokenizer.chat_template"]
        templates["smollm2-instruct"] = bytes(field.parts[field.data[0]]).decode("utf-8")
    for name, source in templates.items():
        if "strftime_now" in source:
            print(f"skipping {name}: output depends on today's date", file=sys.stderr)
            continue
        (OUT / f"{name}.jinja").write_text(source)


SYSTEM = {"role": "system", "content": "You are a careful clinical assistant. Answer with one letter."}
QUESTION = {
    "role": "user",
    "content": "A 45-year-old man has a blood pressure of 150/95 mmHg.\n"
    "Which drug is first-line?\nA. Lisinopril\nB. Propranolol\nC. Hydralazine\nD. Minoxidil",
}
ANSWER = {"role": "assistant", "content": "A"}
FOLLOW_UP = {"role": "user", "content": "Why not B?"}
TRICKY = {
    "role": "user",
    "content": "  Patient says: \"it's a 'sharp' pain\" \\ back\\n  \n"
    "Température 38,5 °C — 患者 🩺\t<|eot_id|> {{ not a tag }}  ",
}

CONVERSATIONS = {
    "single_user": [QUESTION],
    "system_user": [SYSTEM, QUESTION],
    "multi_turn": [QUESTION, ANSWER, FOLLOW_UP],
    "system_multi_turn": [SYSTEM, QUESTION, ANSWER, FOLLOW_UP],
    "ends_with_assistant": [SYSTEM, QUESTION, ANSWER],
    "tricky_content": [SYSTEM, TRICKY],
    "empty_content": [{"role": "user", "content": ""}],
    "not_alternating": [QUESTION, FOLLOW_UP],
    "unknown_role": [{"role": "doctor", "content": "Review this."}],
}


def render_with_transformers(source, messages, add_generation_prompt, bos, eos):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[messages],
        chat_template=source,
        add_generation_prompt=add_generation_prompt,
        bos_token=bos,
        eos_token=eos,
    )
    return rendered[0]


def error_entry(exc):
    import jinja2

    # raise_exception() raises exactly TemplateError; jinja2's own errors are subclasses.
    raised = type(exc) is jinja2.exceptions.TemplateError
    return {"error": str(exc), "raised_by_template": raised}


def render_cases():
    cases = []
    for path in sorted(OUT.glob("*.jinja")):
        name = path.stem
        source = path.read_text()
        bos, eos = special_tokens(name)
        for conv_name, messages in CONVERSATIONS.items():
            for add_generation_prompt in (False, True):
                case = {
                    "template": name,
                    "conversation": conv_name,
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "bos_token": bos,
                    "eos_token": eos,
                }
                try:
                    case["expected"] = render_with_transformers(source, messages, add_generation_prompt, bos, eos)
                except Exception as exc:  # noqa: BLE001 - the error is the expected outcome
                    case.update(error_entry(exc))
                cases.append(case)
    (OUT / "cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(cases)} cases from {len(list(OUT.glob('*.jinja')))} templates", file=sys.stderr)


# One Jinja feature per case, rendered by jinja2 configured as transformers configures it.
FEATURES = [
    ("text", "plain text", {}),
    ("output", "a{{ x }}b", {"x": "X"}),
    ("undefined prints nothing", "[{{ missing }}]", {}),
    ("none and bools", "{{ none }} {{ true }} {{ false }} {{ None }} {{ True }}", {}),
    ("numbers", "{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 * 3 - 1 }} {{ -4 }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ 10 / 5 }} {{ 2 ** 10 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }}", {}),
    ("string escapes", "{{ 'a\\nb\\t\"c\"' }}|{{ \"it's\" }}|{{ '\\u00e9\\x41' }}|{{ 'back\\\\slash' }}", {}),
    ("adjacent strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("comment", "a{# gone #}b", {}),
    ("trim_blocks", "{% if true %}\nx\n{% endif %}\ny", {}),
    ("lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("lstrip after block", "{% if true %}\n  {% if true %}\n  x\n  {% endif %}\n{% endif %}", {}),
    ("minus trims", "a   {{- 'b' -}}   c  {%- if true -%}  d  {%- endif %}", {}),
    ("plus keeps", "a\n  {%+ if true +%}\nb{% endif %}", {}),
    ("comment whitespace", "a {#- c -#} b\n  {# d #}\nc", {}),
    ("output keeps newline", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("trailing newline dropped", "x\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
    ("loop variables", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {"items": ["a", "b", "c"]}),
    ("loop previtem nextitem cycle", "{% for a in [1, 2, 3] %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('x', 'y') }}|{% endfor %}", {}),
    ("for else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for with filter", "{% for x in [1, 2, 3, 4] if x % 2 == 0 %}{{ loop.index }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", {}),
    ("for over string", "{% for c in 'hé!' %}[{{ c }}]{% endfor %}", {}),
    ("for over dict", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("break continue", "{% for n in [1, 2, 3, 4] %}{% if n == 2 %}{% continue %}{% endif %}{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("loop scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("if does not scope", "{% if true %}{% set b = 3 %}{% endif %}{{ b }}", {}),
    ("namespace", "{% set ns = namespace(total=0, seen=false) %}{% for x in [1, 2, 3] %}{% set ns.total = ns.total + x %}{% if x == 2 %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.seen }}", {}),
    ("namespace added attr", "{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}", {}),
    ("set tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set block", "{% set x %}  hi {{ 1 }}  {% endset %}[{{ x }}]", {}),
    ("set block filter", "{% set x | upper | trim %}  hi  {% endset %}[{{ x }}]", {}),
    ("filter block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}", {}),
    ("macro", "{% macro f(a, b='B') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{% set c = 'C' %}{{ f(1) }}{{ f(1, b=2) }}{{ f(a=3) }}", {}),
    ("recursive macro", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}", {}),
    ("dict iteration", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", {"d": {"x": 1, "y": "z"}}),
    ("dict methods", "{{ d.get('x') }} {{ d.get('q') }} {{ d.get('q', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }}", {"d": {"x": 1, "y": "z"}}),
    ("attribute and item", "{{ m.role }} {{ m['content'] }} {{ m.missing is defined }} {{ xs[0] }} {{ xs[-1] }} {{ xs.1 }}", {"m": {"role": "user", "content": "c"}, "xs": [1, 2, 3]}),
    ("slices", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ 'héllo'[1:3] }} {{ s[-3:] }} {{ xs[5:] }}", {"xs": [1, 2, 3, 4], "s": "abcdef"}),
    ("comparisons", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' == 'a' }}{{ 'a' != 'a' }}{{ 3 > 2 }}{{ 1 >= 1 }}{{ 1 == 1.0 }}{{ 1 < 2 < 3 }}{{ 'b' > 'a' }}", {}),
    ("logic", "{{ true and false }} {{ true or false }} {{ not true }} {{ not (1 == 2) }} {{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }}", {}),
    ("in", "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}{{ 'x' in missing }}", {"d": {"k": 1}}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is not defined }}{{ n is none }}{{ s is string }}{{ x is number }}{{ x is integer }}{{ 1.5 is float }}{{ d is mapping }}{{ xs is iterable }}{{ s is iterable }}{{ x is odd }}{{ x is even }}{{ 6 is divisibleby 3 }}{{ false is sameas false }}{{ true is boolean }}{{ x is eq 1 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ d is sequence }}", {"x": 1, "n": None, "s": "s", "d": {}, "xs": []}),
    ("test with args", "{{ 3 is gt 2 }}{{ 3 is lt(2) }}{{ 'a' is in ['a'] }}{{ x is sameas none }}", {"x": None}),
    ("conditional expression", "{{ 'yes' if flag else 'no' }}[{{ 'a' if false }}]{{ 'x' if false else 'y' if true else 'z' }}", {"flag": True}),
    ("concat operator", "{{ 'n=' ~ 3 ~ none ~ missing ~ [1] }}", {}),
    ("string arithmetic", "{{ 'ab' * 3 }}{{ [1] + [2] }}{{ 'a' + 'b' }}", {}),
    ("filter precedence", "{{ 'a' + '  b  ' | trim + 'c' }}|{{ -3 | abs }}|{{ (-3) | abs }}", {}),
    ("string filters", "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}|{{ 'hello world' | capitalize }}|{{ 'hello wORLD-foo' | title }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'é' | length }}", {}),
    ("length and count", "{{ xs | length }} {{ d | length }} {{ 'abc' | count }} {{ missing | length }}", {"xs": [1, 2], "d": {"a": 1}}),
    ("default", "{{ missing | default('d') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ x | d('q') }}", {"x": 0}),
    ("join first last", "{{ xs | join(', ') }}|{{ xs | join }}|{{ xs | first }}|{{ xs | last }}|{{ 'abc' | first }}|{{ [] | first }}|{{ users | join(',', attribute='name') }}", {"xs": [1, "b", 3], "users": [{"name": "a"}, {"name": "b"}]}),
    ("string and list filters", "{{ 5 | string }}{{ 'ab' | list }}{{ d | list }}{{ xs | reverse | list }}{{ 'abc' | reverse }}{{ xs | sort }}{{ xs | sort(reverse=true) }}{{ [1, 1, 2] | unique | list }}{{ xs | min }}{{ xs | max }}{{ xs | sum }}", {"d": {"k": 1, "j": 2}, "xs": [3, 1, 2]}),
    ("number filters", "{{ 3.7 | int }} {{ '42' | int }} {{ 'x' | int }} {{ '2.5' | float }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ -5 | abs }}", {}),
    ("tojson", "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ 'é\"<>&\\n' | tojson }}|{{ 1.0 | tojson }}|{{ d | tojson(sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}", {"x": {"a": [1, 2.5, None, True, "é\n\"<"], "b": {}, "c": []}, "d": {"b": 1, "a": [2]}}),
    ("select reject", "{{ xs | select('odd') | list }}{{ xs | reject('odd') | list }}{{ xs | select | list }}{{ xs | select('gt', 2) | list }}", {"xs": [0, 1, 2, 3, 4]}),
    ("selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ (msgs | selectattr('role', 'equalto', 'user') | list)[-1].content }} {% for m in msgs | rejectattr('role', 'eq', 'user') %}{{ m.content }}{% endfor %} {{ msgs | selectattr('on') | list | length }}", {"msgs": [{"role": "user", "content": "a", "on": True}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}),
    ("map", "{{ msgs | map(attribute='role') | join(',') }} {{ xs | map('string') | join('+') }} {{ msgs | map(attribute='x', default='-') | list }}", {"msgs": [{"role": "user"}, {"role": "assistant"}], "xs": [1, 2]}),
    ("string methods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith('bc') }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'ab cd'.title() }}{{ 'aB'.capitalize() }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\\nb'.splitlines() }}|{{ '12'.isdigit() }}{{ ' '.isspace() }}", {}),
    ("unicode whitespace strip", "[{{ s.strip() }}][{{ s | trim }}]", {"s": "\u00a0\u3000 x \u2009\n"}),
    ("reasoning split", "{% set c = content.split('</think>')[-1].lstrip('\\n') %}{% set r = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}[{{ r }}][{{ c }}]", {"content": "<think>\nhmm\n</think>\n\nHello!"}),
    ("list and dict literals", "{{ [1, 'a', none, true, 1.5, {'k': 2}] }} {{ {'a': 1, 'b': [2]} }} {{ (1, 2) | list }} {{ [] }} {{ {} }}", {}),
    ("repr quoting", "{{ [\"it's\", 'say \"hi\"', 'a\\nb', 'é'] }}", {}),
    ("range", "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}{% for i in range(2) %}{{ i }}{% endfor %}", {}),
    ("dict global", "{{ dict(a=1, b='x') }}", {}),
    ("messages index loop", "{%- for idx in range(0, messages | length) -%}{{ messages[idx]['role'] }}{{ ',' if not loop.last }}{%- endfor -%}", {"messages": [{"role": "user"}, {"role": "assistant"}]}),
    ("reassign context var", "{% set messages = messages[1:] %}{{ messages | length }}", {"messages": [1, 2, 3]}),
    ("nested loops", "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("not precedence", "{{ not x is defined }} {{ not 1 == 2 }} {{ not 'a' in 'abc' }}", {}),
    ("generation block", "a{% generation %}b{% set q = 1 %}{% endgeneration %}c{{ q }}", {}),
    ("dictsort", "{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}|{% for k, v in d | dictsort(true) %}{{ k }}{% endfor %}|{% for p in d | dictsort(by='value', reverse=true) %}{{ p[0] }}{% endfor %}", {"d": {"b": 2, "A": 3, "a": 1}}),
    ("bool arithmetic", "{{ true + 1 }} {{ true == 1 }} {{ false * 3 }}", {}),
    ("float formatting", "{{ 1.0 }} {{ 100.0 }} {{ 1e16 }} {{ 123456789.123 }} {{ 0.0001 }} {{ 0.00001 }} {{ -2.5 }} {{ 1/3 }}", {}),
    ("strip chars with unicode", "{{ '«x»'.strip('«»') }}", {}),
    # Errors: the message is jinja2's; the test only checks that rendering fails.
    ("error raise_exception", "{{ raise_exception('Custom failure: ' ~ x) }}", {"x": 7}),
    ("error attribute of undefined", "{{ x.y }}", {}),
    ("error add undefined", "{{ 'a' + x }}", {}),
    ("error add str int", "{{ 'a' + 1 }}", {}),
    ("error set attr on dict", "{% set d = {} %}{% set d.a = 1 %}", {}),
    ("error iterate none", "{% for x in none %}{% endfor %}", {}),
    ("error tojson undefined", "{{ x | tojson }}", {}),
    ("error division by zero", "{{ 1 // 0 }}", {}),
    ("error list append", "{% set xs = [] %}{{ xs.append(1) }}", {}),
]


def jinja_environment():
    # Exactly what transformers' _compile_jinja_template builds (minus the {% generation %}
    # extension, which needs transformers itself; we compile through it when available).
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template


def render_features():
    compile_template = jinja_environment()
    cases = []
    for name, source, context in FEATURES:
        case = {"name": name, "template": source, "context": context}
        try:
            case["expected"] = compile_template(source).render(**context)
        except Exception as exc:  # noqa: BLE001
            case.update(error_entry(exc))
        cases.append(case)
    (OUT / "features.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(cases)} feature cases", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-cpp", help="llama.cpp source tree (from the llama-cpp-python sdist)")
    parser.add_argument("--smollm2-gguf", help="SmolLM2 Instruct GGUF to read tokenizer.chat_template from")
    args = parser.parse_args()
    if args.llama_cpp or args.smollm2_gguf:
        collect(args)
    render_cases()
    render_features()


if __name__ == "__main__":
    main()
