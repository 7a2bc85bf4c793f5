"""A small byte-level BPE tokenizer trained on the spot from a text file, so nothing comes from a hub.

Byte-level means every string can be encoded (no unknown token); the merges learnt from the shipped text
keep sequences shorter than raw bytes. Training and batch encoding run in the `tokenizers` library's Rust
thread pool, the pool TOKENIZERS_PARALLELISM switches on or off. A thread pool does not survive fork(),
so with forked DataLoader workers envrun sets it to false rather than leave the library to guess.
"""

from __future__ import annotations

import hashlib

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

END_OF_TEXT = "<|endoftext|>"
PADDING = "<|pad|>"


def train_byte_level_bpe(lines: list[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT, PADDING],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(lines, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=END_OF_TEXT, bos_token=END_OF_TEXT, pad_token=PADDING)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """Short hash of vocabulary and merges: ranks that train their own copy must end up with the same one."""
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()[:16]
