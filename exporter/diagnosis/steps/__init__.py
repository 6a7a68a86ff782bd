"""The chain's steps, one module each, in the field guides' order: symptom, network, engine,
gpu, application. Each returns its ``Step`` and the ``Finding``s it implicates; ``chain``
orders, attributes and renders them."""
