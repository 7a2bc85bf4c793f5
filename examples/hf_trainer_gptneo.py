"""HuggingFace Trainer fine-tune of a tiny GPT-Neo, built from a config, on the text this repository ships.

The shape of the LUMI/CSC course exercise, offline: no model, tokenizer or data set comes from a hub.
The model is a 2-layer GPT-Neo made from GPTNeoConfig (random weights), the tokenizer a byte-level BPE
trained on examples/data/tiny_corpus.txt at start-up, and the Trainer does causal-LM training under DDP.
The global batch size is fixed and split between the ranks, so adding GPUs does not change the
optimisation, only its speed.

    torchrun --standalone --nproc-per-node=2 examples/hf_trainer_gptneo.py
    envrun --image build/local-cpu-pytorch.sif srun torchrun examples/hf_trainer_gptneo.py
    envrun --image build/local-cpu-pytorch.sif srun python examples/hf_trainer_gptneo.py

The Trainer needs `accelerate` in the image (transformers installs it only with the [torch] extra).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from example_report import emit_report, finish_distributed, launch_facts, parameter_agreement
from launch_env import current_layout, fill_torch_env_from_slurm
from tiny_tokenizer import tokenizer_fingerprint, train_byte_level_bpe
from torch.utils.data import Dataset

DEFAULT_TEXT = Path(__file__).resolve().parent / "data" / "tiny_corpus.txt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch-size", type=int, default=16, help="sequences per optimizer step over all ranks")
    parser.add_argument("--epochs", type=float, default=8)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (overrides --epochs when > 0)")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--block-size", type=int, default=64, help="tokens per training sequence")
    parser.add_argument("--vocab-size", type=int, default=512)
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--dataloader-workers", type=int, default=0,
                        help="> 0 forks workers after the tokenizer's thread pool ran: the case TOKENIZERS_PARALLELISM is for")
    parser.add_argument("--output-dir", default="./checkpoints/hf_trainer_gptneo")
    parser.add_argument("--no-save", action="store_true", help="do not write the final model and tokenizer")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args(argv)


class TokenWindows(Dataset):
    """Overlapping fixed-length windows over one token stream; the model shifts labels itself."""

    def __init__(self, tokens: list[int], block_size: int, stride: int) -> None:
        self.tokens = torch.tensor(tokens, dtype=torch.long)
        self.block_size = block_size
        self.starts = list(range(0, max(1, len(tokens) - block_size + 1), stride))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        window = self.tokens[self.starts[index]: self.starts[index] + self.block_size]
        return {"input_ids": window, "labels": window.clone()}


def split_token_stream(tokens: list[int], eval_fraction: float = 0.1) -> tuple[list[int], list[int]]:
    # Held-out text from the end of the file: no training window overlaps it.
    cut = int(len(tokens) * (1 - eval_fraction))
    return tokens[:cut], tokens[cut:]


def make_printer_callback() -> Any:
    from transformers import TrainerCallback

    class RankZeroPrinter(TrainerCallback):
        """The stock PrinterCallback prints on every node's local rank 0; the brief is global rank 0 only."""

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and logs:
                shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in logs.items() if k != "total_flos"}
                print(f"step {state.global_step}: {shown}", flush=True)

    return RankZeroPrinter()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        import accelerate  # noqa: F401 - the Trainer imports it lazily and fails late; say so up front
    except ImportError:
        print("hf_trainer_gptneo: the HuggingFace Trainer needs `accelerate`, which this environment lacks "
              "(install transformers[torch] or add accelerate to the image)", file=sys.stderr)
        return 2
    from transformers import (
        GPTNeoConfig,
        GPTNeoForCausalLM,
        PrinterCallback,
        Trainer,
        TrainingArguments,
        default_data_collator,
        set_seed,
    )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the shard-writing bar is noise next to the per-step lines
    fill_torch_env_from_slurm()
    layout = current_layout()
    if args.global_batch_size % layout.world_size:
        print(f"--global-batch-size {args.global_batch_size} is not divisible by the world size {layout.world_size}",
              file=sys.stderr)
        return 2
    per_device = args.global_batch_size // layout.world_size
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"

    # Every rank trains the same tokenizer from the same text; the fingerprint check below proves it.
    lines = [line for line in args.text.read_text(encoding="utf-8").splitlines() if line.strip()]
    tokenizer = train_byte_level_bpe(lines, vocab_size=args.vocab_size)
    # One batch call: the Rust thread pool encodes the lines in parallel when TOKENIZERS_PARALLELISM allows.
    encoded = tokenizer(lines)["input_ids"]
    stream = [token for ids in encoded for token in [*ids, tokenizer.eos_token_id]]
    train_tokens, eval_tokens = split_token_stream(stream)
    train_set = TokenWindows(train_tokens, args.block_size, stride=max(1, args.block_size // 4))
    eval_set = TokenWindows(eval_tokens, args.block_size, stride=args.block_size)

    set_seed(args.seed)
    config = GPTNeoConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_layers=2,
        num_heads=2,
        attention_types=[[["global", "local"], 1]],
        window_size=16,  # smaller than a sequence, so the local layer really is local
        intermediate_size=256,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPTNeoForCausalLM(config)

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=per_device,
        per_device_eval_batch_size=per_device,
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        learning_rate=args.lr,
        logging_strategy="steps",
        logging_steps=5,
        logging_first_step=True,
        eval_strategy="no",
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=not use_cuda,
        # Naming a backend makes Accelerate expect a process group even in a job of one.
        ddp_backend=backend if layout.world_size > 1 else None,
        ddp_find_unused_parameters=False,
        dataloader_num_workers=args.dataloader_workers,
        seed=args.seed,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=eval_set,
        data_collator=default_data_collator,
        processing_class=tokenizer,
        callbacks=[make_printer_callback()],
    )
    trainer.remove_callback(PrinterCallback)
    is_rank_zero = trainer.is_world_process_zero()
    if is_rank_zero:
        print(f"hf_trainer_gptneo: {layout.world_size} ranks x {per_device} sequences = global batch {args.global_batch_size}; "
              f"{len(train_set)} training windows of {args.block_size} tokens, vocabulary {len(tokenizer)}, "
              f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)

    result = trainer.train()
    metrics = trainer.evaluate()
    if not args.no_save:
        trainer.save_model(args.output_dir)  # writes on rank 0 only

    logged_losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    fingerprint = tokenizer_fingerprint(tokenizer)
    fingerprints: list[str | None] = [None] * layout.world_size
    if dist.is_initialized():
        dist.all_gather_object(fingerprints, fingerprint)
    else:
        fingerprints = [fingerprint]
    agreement = parameter_agreement(trainer.model.parameters())
    emit_report({
        "example": "hf_trainer_gptneo",
        "rank": layout.rank,
        "world_size": layout.world_size,
        "local_rank": layout.local_rank,
        "local_world_size": layout.local_world_size,
        "backend": dist.get_backend() if dist.is_initialized() else backend,
        "trainer_world_size": training_args.world_size,
        "trainer_process_index": training_args.process_index,
        "parallel_mode": str(training_args.parallel_mode),
        **launch_facts(),
        "global_batch_size": args.global_batch_size,
        "per_device_batch_size": per_device,
        "train_steps": trainer.state.global_step,
        "first_logged_loss": logged_losses[0] if logged_losses else None,
        "final_logged_loss": logged_losses[-1] if logged_losses else None,
        "train_loss": result.training_loss,
        "eval_loss": metrics["eval_loss"],
        "eval_perplexity": math.exp(metrics["eval_loss"]),
        "vocab_size": len(tokenizer),
        "tokenizer_fingerprint": fingerprint,
        "tokenizers_agree": len(set(fingerprints)) == 1,
        **agreement,
        "saved_to": None if args.no_save else args.output_dir,
        "seconds": round(time.perf_counter() - started, 3),
    })
    train_loss, eval_loss = result.training_loss, metrics["eval_loss"]
    del trainer, model, result  # the Trainer and its DDP wrapper hold the process group: release it before exit
    finish_distributed()
    if is_rank_zero:
        print(f"hf_trainer_gptneo: train loss {train_loss:.4f}, eval perplexity {math.exp(eval_loss):.2f}, "
              f"parameters agree: {agreement['params_agree']}", flush=True)
    return 0 if agreement["params_agree"] and len(set(fingerprints)) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
