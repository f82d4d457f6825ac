"""zen in HF accelerate: the comm hook on the model accelerate prepared.

Run on 2 CPU processes (Gloo) with torchrun, which accelerate detects:

    torchrun --standalone --nproc-per-node 2 examples/accelerate_ddp.py --sync zen
    torchrun --standalone --nproc-per-node 2 examples/accelerate_ddp.py --sync ddp

The model is a small bag-of-words classifier whose embedding sees a few
hundred of its 20,000 rows per step, so most rows of its gradient are zero:
what zen does not send. Rank 0 prints each step's loss (the mean over ranks,
to 9 digits) and, for --sync zen, what synchronized each parameter
(ZenState.decisions()). On 2 ranks both runs print the same losses.

The recipe is one line after prepare(), which wraps the model in
DistributedDataParallel on a multi-process run (CPU and GPU alike):

    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    state = zen.torch.register(model)
"""

import argparse
import gc

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

import zen.torch


class BagOfWords(torch.nn.Module):
    def __init__(self, vocab, width, classes):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(vocab, width, mode="mean")
        self.out = torch.nn.Linear(width, classes)

    def forward(self, tokens):
        return self.out(self.emb(tokens))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sync", choices=["zen", "ddp"], default="zen")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=20000)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=True)
    set_seed(args.seed)
    classes = 4
    # Data: the same on every rank; the prepared loader gives each rank its share.
    g = torch.Generator().manual_seed(args.seed)
    n = args.steps * args.batch * accelerator.num_processes
    tokens = torch.randint(0, args.vocab, (n, args.seq_len), generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens, labels),
                                       batch_size=args.batch, shuffle=False)
    model = BagOfWords(args.vocab, args.width, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise SystemExit(f"accelerate did not wrap the model in DDP ({type(model).__name__}): "
                         "run it with torchrun or `accelerate launch` on 2 or more processes")
    state = zen.torch.register(model) if args.sync == "zen" else None

    losses = []
    for step, (x, y) in enumerate(data):
        if step == args.steps:
            break
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append(accelerator.reduce(loss.detach(), reduction="mean").item())

    if accelerator.is_main_process:
        for step, loss in enumerate(losses):
            print(f"step {step} loss {loss:.9g}")
        if state is not None:
            for name, d in sorted(state.decisions().items()):
                print(f"zen: {name} bucket {d['bucket']} path {d['path']} scheme {d['scheme']}")
    # Every rank past its last collective, then zen's state and the model
    # gone, before the process group is torn down (as examples/train_lm.py:
    # torch 2.13's Gloo can hang or abort at exit otherwise).
    accelerator.wait_for_everyone()
    del model, optimizer, state
    gc.collect()
    accelerator.end_training()


if __name__ == "__main__":
    main()
