"""Short Hugging Face `transformers` Trainer fine-tune (sequence classification).

Ordinary user code: the Trainer finds its peers from the standard variables
torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), so it
runs unchanged on one process or under a per-node launch:

    torchrun --nnodes 2 --nproc_per_node 4 --node_rank $NODE_RANK \\
        --master_addr $MASTER_ADDR --master_port $MASTER_PORT \\
        train.py --model distilbert-base-uncased --output_dir ./outputs --epochs 1

The data is a tiny in-memory sentiment set, so no data set has to be staged;
the model and tokenizer come from `--model` (a Hub name or a local directory).

At the end every rank prints one line
    TRAINSPEC_RESULT {"script": "huggingface", "rank": ..., "allreduce": ..., ...}
where `allreduce` is the sum over all ranks of a tensor holding 1.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

SENTENCES = [
    ("a delightful, moving film", 1),
    ("the best meal I have had in years", 1),
    ("clear instructions and friendly staff", 1),
    ("works exactly as described", 1),
    ("I would happily buy it again", 1),
    ("a tedious, overlong mess", 0),
    ("the food was cold and bland", 0),
    ("it broke after two days", 0),
    ("rude service and a long wait", 0),
    ("I want my money back", 0),
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="distilbert-base-uncased", help="Hub model name or local directory")
    parser.add_argument("--output_dir", default="./outputs", help="where the fine-tuned model is saved")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch_size", type=int, default=8, help="per-device batch size")
    parser.add_argument("--repeat", type=int, default=8, help="copies of the in-memory data set")
    parser.add_argument("--max_length", type=int, default=32)
    parser.add_argument("--timeout", type=int, default=1800, help="process-group timeout in seconds")
    return parser.parse_args(argv)


class InMemoryDataset(torch.utils.data.Dataset):
    """Tokenized (text, label) pairs held in memory."""

    def __init__(self, tokenizer, pairs, max_length):
        texts = [text for text, _ in pairs]
        self.encodings = tokenizer(
            texts, truncation=True, padding="max_length", max_length=max_length, return_tensors="pt"
        )
        self.labels = torch.tensor([label for _, label in pairs])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        item = {key: value[index] for key, value in self.encodings.items()}
        item["labels"] = self.labels[index]
        return item


def print_result(script, rank, world_size, local_rank, node_rank, allreduce):
    master = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    result = {
        "script": script, "rank": rank, "world_size": world_size, "local_rank": local_rank,
        "node_rank": node_rank, "allreduce": allreduce, "master": master,
    }
    # One write call, so lines from several processes sharing a pipe never interleave.
    sys.stdout.write("TRAINSPEC_RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def main(argv=None):
    args = parse_args(argv)

    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    set_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    dataset = InMemoryDataset(tokenizer, SENTENCES * args.repeat, args.max_length)

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=5e-5,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        seed=0,
        ddp_timeout=args.timeout,
        ddp_find_unused_parameters=False,
        # On CPU, accelerate sets up gloo DDP across torchrun's processes only when told to use the CPU.
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
    trainer.train()
    trainer.save_model(args.output_dir)  # writes on the main process only
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(args.output_dir)

    # Under torchrun the Trainer has set up the process group; it is still up here.
    if dist.is_available() and dist.is_initialized():
        ones = torch.ones(1, device=training_args.device)
        dist.all_reduce(ones, op=dist.ReduceOp.SUM)
        allreduce = int(ones.item())
    else:
        allreduce = 1
    node_rank = int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0")))
    print_result("huggingface", training_args.process_index, training_args.world_size,
                 training_args.local_process_index, node_rank, allreduce)

    # Without this, gloo jobs sometimes abort with SIGABRT at interpreter exit.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
