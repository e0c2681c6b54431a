"""Measuring models: evaluation, localization, faithfulness, comparing two models."""
