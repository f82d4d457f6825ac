"""zen in PyTorch Lightning: DDPStrategy with zen's comm hook.

Run on 2 CPU processes (Gloo) with torchrun, which Lightning detects:

    torchrun --standalone --nproc-per-node 2 examples/lightning_ddp.py --sync zen
    torchrun --standalone --nproc-per-node 2 examples/lightning_ddp.py --sync ddp

The model is a small bag-of-words classifier whose embedding sees a few
hundred of its 20,000 rows per step, so most rows of its gradient are zero:
what zen does not send. Rank 0 prints each step's loss (the mean over ranks,
to 9 digits) and, for --sync zen, what synchronized each parameter
(ZenState.decisions()). On 2 ranks both runs print the same losses.

The recipe is the two DDPStrategy arguments:

    state = zen.torch.ZenState(module=model)
    strategy = DDPStrategy(ddp_comm_state=state, ddp_comm_hook=zen.torch.comm_hook)

Lightning registers a comm hook only when the model is on a GPU; on CPU the
ZenRegistering strategy below registers the same hook from the same two
arguments (one method, see _register_ddp_hooks).
"""

import argparse

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy

import zen.torch


class BagOfWords(L.LightningModule):
    def __init__(self, vocab, width, classes, lr):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(vocab, width, mode="mean")
        self.out = torch.nn.Linear(width, classes)
        self.lr = lr
        self.losses = []  # the mean over ranks of each step's loss

    def training_step(self, batch, batch_idx):
        tokens, labels = batch
        loss = torch.nn.functional.cross_entropy(self.out(self.emb(tokens)), labels)
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        self.losses.append(mean.item() / torch.distributed.get_world_size())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class ZenRegistering(DDPStrategy):
    """DDPStrategy that also registers its ddp_comm_hook on CPU.

    Lightning 2.6's DDPStrategy._register_ddp_hooks registers the hook only
    when the root device is CUDA; zen's hook runs on CPU tensors (Gloo) too.
    On a GPU the parent's registration runs unchanged."""

    def _register_ddp_hooks(self):
        if self.root_device.type == "cuda":
            return super()._register_ddp_hooks()
        if self._ddp_comm_hook is not None:
            self.model.register_comm_hook(self._ddp_comm_state, self._ddp_comm_hook)


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

    L.seed_everything(args.seed, verbose=False)
    classes = 4
    # Data: the same on every rank; Lightning's DistributedSampler gives each
    # rank its own share.
    g = torch.Generator().manual_seed(args.seed)
    n = args.steps * args.batch * 2
    tokens = torch.randint(0, args.vocab, (n, args.seq_len), generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens, labels),
                                       batch_size=args.batch, shuffle=False)
    model = BagOfWords(args.vocab, args.width, classes, lr=0.5)

    state = None
    if args.sync == "zen":
        state = zen.torch.ZenState(module=model)
        strategy = ZenRegistering(process_group_backend="gloo", ddp_comm_state=state,
                                  ddp_comm_hook=zen.torch.comm_hook)
    else:
        strategy = DDPStrategy(process_group_backend="gloo")
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=args.steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, data)

    if trainer.global_rank == 0:
        for step, loss in enumerate(model.losses):
            print(f"step {step} loss {loss:.9g}")
        if state is not None:
            for name, d in sorted(state.decisions().items()):
                print(f"zen: {name} bucket {d['bucket']} path {d['path']} scheme {d['scheme']}")


if __name__ == "__main__":
    main()
