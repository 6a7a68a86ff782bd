"""The network path checks per carrier: ICMP/TCP bursts (``check``) with their jitter math
(``jitter``), traceroutes (``route``) classified by the CIDR route table (``routes``, the
built-in table under ``data/``)."""
