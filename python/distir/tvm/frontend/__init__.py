"""Bringing models into distir from TVM.

- ``importer``: a TVM Relax module, ``R.dist`` included, as a distir module (``from_relax``);
- ``nn``: a ``tvm.relax.frontend.nn`` model as a distir module, its weights named (``from_nn``).
"""
