"""The config file: typed models, and the YAML loader that names each problem's path and line."""
