"""File formats: readers and writers that map bytes to arrays (npy/npz, hdf5, safetensors, ...).

Each format lives in its own module; the public names are re-exported from :mod:`dataio`.
"""
