"""Build the tiny model the CPU rehearsals serve: no hub download, about half a megabyte.

    venv-vllm/bin/python spoteval/vllm/tiny_model.py OUT_DIR

Runs with the vLLM environment's Python (it needs torch, transformers and tokenizers, which that
environment has), standalone: it imports nothing of spot-eval. It writes, into OUT_DIR atomically
(a temporary folder renamed at the end, so a half-built model is never served):

- a byte-level BPE tokenizer (512 tokens) trained on text generated here, with `<s>`, `</s>` and
  `<pad>` and a chat template (`<|user|>` / `<|assistant|>` turns), so `/v1/chat/completions` works;
- a Llama configuration (hidden size 64, 2 layers, one attention head of 64: vLLM's CPU attention
  refuses a head size of 16; context 2048) and its random weights (seed 0) as safetensors, float32.

The answers are noise: the model exists to exercise a real vLLM server (its start-up phases, its
process tree, its shutdown), not to answer well.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

VOCAB_SIZE = 512
SPECIAL = ("<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
_WORDS = (
    "episode",
    "answer",
    "model",
    "server",
    "spot",
    "node",
    "restart",
    "preempted",
    "notice",
    "result",
    "attempt",
    "record",
    "store",
    "price",
    "budget",
    "grant",
    "weights",
    "cache",
    "compile",
    "warm",
    "ready",
    "health",
    "token",
    "prompt",
    "brief",
    "the",
    "a",
    "of",
    "to",
    "and",
    "is",
    "in",
    "on",
    "for",
    "with",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "question",
    "score",
)


def corpus(lines: int = 4000, seed: int = 0) -> Iterator[str]:
    """Generated text in the shape of the drill's prompts (`Episode ep-0001: answer briefly.`)."""
    rng = random.Random(seed)
    for i in range(lines):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16)))
        yield f"Episode ep-{i:04d}: answer briefly. {words.capitalize()}."


def build(out: Path) -> Path:
    import torch  # type: ignore[import-not-found]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found]
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # type: ignore[import-not-found]

    torch.manual_seed(0)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        fast.save_pretrained(tmp)
        model.save_pretrained(tmp, safe_serialization=True)
        os.chmod(tmp, 0o755)  # mkdtemp made it private
        for item in tmp.iterdir():
            os.chmod(item, 0o644)
        if out.exists():  # built meanwhile by another process: keep that one
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if not (out / "config.json").exists():
        build(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
