"""Integrations of mxmoe into model libraries (``mxmoe.integrations.transformers``)."""
