"""Running a spec: what will train, checked before anything is written (`plan`), one variant ×
seed into one MLflow child run (`child_run`), an invocation on this host (`runner`) or as Slurm
jobs (`slurm_run`, through `cluster/`).
"""
