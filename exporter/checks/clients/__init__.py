"""The clients check: real users' TCP connections on local ports, per carrier."""
