"""The engine check: scrape an inference engine's /metrics, normalize it by the mapping table.

``table`` (the mapping table) and ``parse`` (the exposition parser) are kept free of HTTP and
scheduling so the simulator, the docs test and the benchmark use the same table and parser.
"""
