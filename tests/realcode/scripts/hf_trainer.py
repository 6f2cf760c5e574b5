"""Hugging Face ``Trainer`` fine-tuning a tiny BERT classifier on CPU, launched with torchrun.

    torchrun --nproc_per_node=2 hf_trainer.py --output-dir out --max-steps 10

The model is built from a config (no downloaded weights) and trained on synthetic token ids whose
label is whether token 7 occurs. Trainer sees the torchrun environment and trains with DDP over
gloo, two DataLoader workers per rank. Rank 0 prints ``FINAL_LOSS=<float>`` (``train_loss``).
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class SyntheticTokens(Dataset):
    """Fixed random sequences of token ids; label 1 when token 7 appears in the sequence."""

    def __init__(self, size: int = 128, length: int = 16, vocab_size: int = 100) -> None:
        generator = torch.Generator().manual_seed(1234)
        self.input_ids = torch.randint(1, vocab_size, (size, length), generator=generator)
        self.labels = (self.input_ids == 7).any(dim=1).long()

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = self.input_ids[index]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": self.labels[index]}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default="hf_trainer_out")
    parser.add_argument("--max-steps", type=int, default=10)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        use_cpu=True,
        ddp_backend="gloo",
        report_to=[],
        max_steps=args.max_steps,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        dataloader_num_workers=2,
        seed=0,
        data_seed=0,
        logging_steps=5,
        save_strategy="no",
        disable_tqdm=True,
    )
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    trainer = Trainer(model=model, args=training_args, train_dataset=SyntheticTokens())
    output = trainer.train()
    if training_args.process_index == 0:
        print(f"FINAL_LOSS={output.training_loss:.10g}", flush=True)


if __name__ == "__main__":
    main()
