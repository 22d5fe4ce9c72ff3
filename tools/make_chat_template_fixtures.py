#!/usr/bin/env python3
"""Regenerate the chat-template fixtures of `meshtrain data instruct`: real
Jinja chat templates beside the tokenizer fixtures, and the token ids the
`transformers` library gives for conversations rendered with them.

Reads the tokenizers tools/make_tokenizer_fixtures.py made (nothing is
retrained) and writes, deterministically:
  tests/fixtures/tokenizers/llama2_style/tokenizer_config.json
      Llama-2-chat's chat template (meta-llama/Llama-2-7b-chat-hf), <s>/</s>.
  tests/fixtures/tokenizers/llama3_style/tokenizer_config.json
      Llama 3 instruct's (meta-llama/Meta-Llama-3-8B-Instruct), eos <|eot_id|>.
      (The fixture has no <|start_header_id|>/<|end_header_id|> tokens, so
      both sides encode them as text.)
  tests/fixtures/tokenizers/chatml_style/{tokenizer.json,tokenizer_config.json}
      gpt2_style's tokenizer with <|im_start|> and <|im_end|> added as special
      tokens (ids 700, 701), and the ChatML template (teknium/OpenHermes-2.5).
  tests/fixtures/tokenizers/chat_cases.json
      "templates": the Jinja strings, by built-in name (mistral:
      Mistral-7B-Instruct-v0.2's, also Mixtral-8x7B-Instruct's);
      "cases": per (tokenizer, template, conversation): the ids of
      apply_chat_template(tokenize=True) (the template writes BOS itself, so
      no special tokens are added around it), and the reference mask as a
      string of 0/1: 1 for each token inside an assistant turn's trained span
      (its content and the token ending the turn; llama2: with the spaces
      around it) by the library's character offsets.

Usage: python3 tools/make_chat_template_fixtures.py [--dir tests/fixtures/tokenizers]
Needs: transformers (5.x), tokenizers.
"""
import argparse
import json
import os

from tokenizers import AddedToken, Tokenizer
from transformers import PreTrainedTokenizerFast

TEMPLATES = {
    # meta-llama/Llama-2-7b-chat-hf, tokenizer_config.json
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}"
        "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
        "{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}"
        "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
        "{% endif %}{% endfor %}"),
    # meta-llama/Meta-Llama-3-8B-Instruct, tokenizer_config.json
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}"
        "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"),
    # teknium/OpenHermes-2.5-Mistral-7B (ChatML), tokenizer_config.json
    "chatml": (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"),
    # mistralai/Mistral-7B-Instruct-v0.2 (and Mixtral-8x7B-Instruct-v0.1)
    "mistral": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
        "{% endif %}{% endfor %}"),
}

# tokenizer folder -> (template, bos, eos, unk); mistral reuses llama2_style's
# tokenizer (Mistral's is the same SentencePiece-style kind).
KINDS = {
    "llama2_style": ("llama2", "<s>", "</s>", "<unk>"),
    "llama3_style": ("llama3", "<|begin_of_text|>", "<|eot_id|>", None),
    "chatml_style": ("chatml", None, "<|im_end|>", None),
}
CASE_RUNS = [("llama2_style", "llama2"), ("llama3_style", "llama3"),
             ("chatml_style", "chatml"), ("llama2_style", "mistral")]


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    [msg("system", "Answer briefly."), msg("user", "What is the capital of France?"),
     msg("assistant", "Paris.")],
    [msg("user", "Name a colour."), msg("assistant", "Blue."),
     msg("user", "Another?"), msg("assistant", "Green: grass.")],
    [msg("user", "Привет! 你好？"), msg("assistant", "Всё хорошо 😀 café")],
    # Spaces and new lines around the contents (stripped by llama2 and llama3).
    [msg("user", "  Tell me a joke.\n"), msg("assistant", "  Why did the chicken cross the road?\n\n")],
    [msg("system", "Be terse.\nOne line."), msg("user", "2+2?"), msg("assistant", "4"),
     msg("user", "3*3?"), msg("assistant", "9.")],
]

# Where an assistant turn's trained span starts and ends inside the text it
# adds to the rendering (its header and the separator after it are not trained).
TRAINED_SPAN = {"chatml": ("<|im_start|>assistant\n", "\n"),
                "llama3": ("<|start_header_id|>assistant<|end_header_id|>\n\n", ""),
                "llama2": ("", ""), "mistral": ("", "")}


def hf_tokenizer(d, bos, eos, unk, template):
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                  bos_token=bos, eos_token=eos, unk_token=unk)
    tok.chat_template = template
    return tok


def make_chatml_tokenizer(root):
    tok = Tokenizer.from_file(os.path.join(root, "gpt2_style", "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                            AddedToken("<|im_end|>", special=True, normalized=False)])
    d = os.path.join(root, "chatml_style")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)


def write_config(root, kind):
    name, bos, eos, unk = KINDS[kind]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    for key, value in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk)):
        if value is not None:
            config[key] = value
    config["chat_template"] = TEMPLATES[name]
    with open(os.path.join(root, kind, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, ensure_ascii=True, indent=2)
        fh.write("\n")


def reference(tok, template, messages):
    text = tok.apply_chat_template(messages, tokenize=False)
    ids = tok.apply_chat_template(messages, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert enc["input_ids"] == ids, "apply_chat_template and encoding its text disagree"
    # The character spans of the assistant turns: what each adds to the text.
    head, tail = TRAINED_SPAN[template]
    spans = []
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = tok.apply_chat_template(messages[:k], tokenize=False) if k else ""
        upto = tok.apply_chat_template(messages[:k + 1], tokenize=False)
        assert text.startswith(upto) and upto.startswith(before), "rendering is not incremental"
        turn = upto[len(before):]
        assert turn.startswith(head) and turn.endswith(tail), (template, turn)
        spans.append((len(before) + len(head), len(upto) - len(tail)))
    mask = [int(any(a <= s and e <= b and s < e for a, b in spans))
            for s, e in enc["offset_mapping"]]
    return text, ids, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="tests/fixtures/tokenizers")
    args = ap.parse_args()
    make_chatml_tokenizer(args.dir)
    for kind in KINDS:
        write_config(args.dir, kind)
    cases = []
    for kind, name in CASE_RUNS:
        _, bos, eos, unk = KINDS[kind]
        tok = hf_tokenizer(os.path.join(args.dir, kind), bos, eos, unk, TEMPLATES[name])
        for messages in CONVERSATIONS:
            if name == "mistral" and messages[0]["role"] == "system":
                continue  # its template refuses a system message
            text, ids, mask = reference(tok, name, messages)
            assert len(ids) == len(mask)
            cases.append({"tokenizer": kind, "template": name, "messages": messages,
                          "ids": ids, "mask": "".join(map(str, mask))})
    path = os.path.join(args.dir, "chat_cases.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"templates": ' + json.dumps(TEMPLATES, ensure_ascii=True, indent=1) +
                 ',\n"cases": [\n')
        fh.write(",\n".join(json.dumps(c, ensure_ascii=True, separators=(",", ":"))
                            for c in cases))
        fh.write("\n]}\n")
    print(f"{len(cases)} cases in {path}")


if __name__ == "__main__":
    main()
