"""Slurm jobs through submitit: what a job runs (`job.py`), its submission, the queue and the
ledger of submitted jobs (`slurm.py`). `minimind run`, `sweep` and `study` launch through it when
the spec's `launcher.name` is `slurm`; submitit is imported only then (extra `slurm`)."""
