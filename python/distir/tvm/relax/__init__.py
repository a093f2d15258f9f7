"""Export a local-view distir module to TVM Relax.

``export`` walks each function and asks ``ops`` for each op's Relax form; ``ops`` hands the
``R.ccl.*`` collectives to ``collectives`` (Disco's runtime functions); both emit through the
function exporter's interface declared in ``emitter``, and ``session`` says which Disco session
the module needs. Each imports only the ones after it in that order (an import-linter contract).
"""
