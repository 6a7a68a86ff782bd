"""The network path checks per carrier: ICMP/TCP bursts (``check``), traceroutes (``route``)
classified by the CIDR route table (``routes``, built-in table under ``data/``)."""
