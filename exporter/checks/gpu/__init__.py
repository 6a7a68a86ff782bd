"""The GPU check: NVML sampling (``nvml``) on one worker thread, exported by ``check``."""
