"""Glue between tailor's ops and the frameworks users already run.

  tailor.integrations.transformers   "tailor" as a Hugging Face transformers
                                     experts implementation

Each module imports its framework on import; this package imports none.
"""
