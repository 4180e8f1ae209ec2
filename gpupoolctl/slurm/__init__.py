"""Slurm as a backend: jobs submitted, listed and cancelled through Slurm's own commands
(sbatch, squeue, scancel, scontrol, sacct), and the stress harness driving a real Slurm.

Stdlib only; the commands are found when first used (see client.SlurmClient).
"""
