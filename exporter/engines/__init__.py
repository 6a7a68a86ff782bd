"""Engine metric families: the mapping table (``table``) and the exposition parser (``parse``).

Kept free of HTTP and scheduling so the simulator, the docs test and the benchmark can use
the same table and parser as the engine check.
"""
