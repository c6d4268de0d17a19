"""`minimind run SPEC [-o KEY=VALUE]... [--dry-run] [--resume] [--variant NAME]... [--nproc N]
[--jobs N] [--launcher slurm]`: train every variant (or the named ones) × seed (in N processes
with DDP, launched through torchrun; or N runs at once, `minimind.run.jobs`), here or as Slurm
jobs (`minimind.run.slurm_run`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from minimind.commands.options import add_launcher_argument, add_spec_arguments, launcher_overrides
from minimind.foundations.exit_codes import fail

if TYPE_CHECKING:
    from minimind.spec import Spec


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="train every variant x seed of a spec, logged to MLflow",
        description="Train every ablation variant x seed of an experiment spec, log the runs to "
        "MLflow and print a comparison table. A bad spec or override exits with code 2.",
    )
    add_spec_arguments(
        parser, "experiment spec (YAML), e.g. experiments/quickstart.yaml", "train.steps=50"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="list variants, parameter counts, FLOPs per token and tokens per run; write nothing",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the newest invocation of this spec: skip finished runs, resume "
        "interrupted ones from their checkpoints",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="with --resume: train an interrupted run whose checkpoint is not on this machine "
        "anew, in a new run (refused without it: the old run's curve would repeat)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME",
        help="train only this variant (its name as the runs are tagged, e.g. norm=layernorm; "
        "repeatable); every variant is still expanded, so a `match:` resizes it as before",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        default=1,
        metavar="N",
        help="train with DDP in N processes on this host, a shortcut for torchrun --standalone "
        "--nproc_per_node N -m minimind run ... (train.batch_size is the global batch)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="train N runs at once on this host, each in its own process (on GPUs round-robin; "
        "on a CPU with cores/N threads each): short for -o launcher.jobs=N",
    )
    add_launcher_argument(parser)
    # What a Slurm job of `--launcher slurm` runs: one child under its submitter's parent run.
    parser.add_argument("--parent-run", help=argparse.SUPPRESS)
    parser.add_argument("--only", metavar="VARIANT/SEEDK", help=argparse.SUPPRESS)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from minimind.spec import SpecError, load_spec

    if args.nproc < 1:
        return fail(f"--nproc must be >= 1, got {args.nproc}")
    if args.jobs is not None and args.jobs < 1:
        return fail(f"--jobs must be >= 1, got {args.jobs}")
    if (args.parent_run is None) != (args.only is None):
        return fail("--parent-run and --only go together")
    if args.restart and not args.resume:
        return fail("--restart: goes with --resume")
    try:
        spec = load_spec(args.spec, [*args.override, *launcher_overrides(args), *_jobs(args)])
    except SpecError as err:
        return fail(str(err))
    if spec.launcher.jobs > 1 and (args.nproc > 1 or spec.launcher.name != "local"):
        return fail("launcher.jobs: several runs at once go with the local launcher and --nproc 1")
    # Imported once the spec is valid: a bad spec is answered before torch is imported (seconds),
    # and `minimind --help` and the other commands stay quick.
    from minimind.run.runner import JobTarget, run_spec
    from minimind.training import distributed

    in_job = args.parent_run is not None
    if spec.launcher.name == "slurm" and not in_job:
        from minimind.run.slurm_run import submit_spec

        return submit_spec(
            spec,
            dry_run=args.dry_run,
            resume=args.resume,
            nproc=args.nproc,
            only=tuple(args.variant),
        )
    if args.nproc > 1 and not args.dry_run and not distributed.launched_by_torchrun():
        return _relaunch(args, spec)
    job = JobTarget(args.parent_run, args.only) if in_job else None
    if spec.launcher.jobs > 1 and not in_job:  # several runs at once, each in its own process
        from minimind.run.jobs import run_jobs

        only = tuple(args.variant)
        return run_spec(
            spec,
            dry_run=args.dry_run,
            resume=args.resume,
            only=only,
            execute_with=lambda plan, _data, resume, restart: run_jobs(plan, resume, restart, only),
        )
    with distributed.process_group():
        return run_spec(
            spec,
            dry_run=args.dry_run,
            resume=args.resume,
            restart=args.restart,
            only=tuple(args.variant),
            job=job,
        )


def _jobs(args: argparse.Namespace) -> list[str]:
    """The override `--jobs` stands for (none without it), after the `-o`s so that it wins."""
    return [] if args.jobs is None else [f"launcher.jobs={args.jobs}"]


def _relaunch(args: argparse.Namespace, spec: Spec) -> int:
    """Check the plan here (a bad one exits 2 before any process starts), then launch the ranks."""
    from minimind.run.plan import plan_run
    from minimind.spec import SpecError
    from minimind.training import distributed

    try:
        plan_run(spec, world_size=args.nproc, only=args.variant)
    except SpecError as err:
        return fail(str(err))
    # `--launcher` goes on as the override it stands for: a rank that lost it would read the
    # spec's own launcher, and under `slurm` every rank would submit the whole spec as jobs.
    overrides = [*args.override, *launcher_overrides(args)]
    argv = ["run", args.spec, *(f"--override={o}" for o in overrides)]
    flags = {"--resume": args.resume, "--restart": args.restart, "--verbose": args.verbose}
    argv += [flag for flag, given in flags.items() if given]
    argv += [f"--variant={name}" for name in args.variant]
    if args.parent_run is not None:
        argv += [f"--parent-run={args.parent_run}", f"--only={args.only}"]
    return distributed.launch(args.nproc, argv, verbose=args.verbose)
