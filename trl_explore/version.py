"""The package's version (also ``trl_explore.__version__``), in a module of its own so that the model card and the
offline-dataset manifest can name it without importing the package's face."""

__version__ = "0.1.0"
