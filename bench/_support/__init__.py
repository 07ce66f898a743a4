"""What several benches share: the machine's CPU accounting, the CLI runs they time, the NeMo Gym
server sweep's decisions (tested in tests/unit/test_bench_nemo_gym_sweep.py)."""
