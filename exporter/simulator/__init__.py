"""A simulator for trying the stack: an OpenAI-compatible server backed by a small
continuous-batching model that runs in real time, serving engine metrics in the formats of
vLLM, TensorRT-LLM, Triton and SGLang. It is not an inference engine: it generates plain
words, and its latencies come from a model of queueing, prefill and decode (docs/simulator.md).
"""
