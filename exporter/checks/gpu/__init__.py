"""The GPU check: NVML sampling (``sampler``) on one worker thread, exported by ``check``."""
