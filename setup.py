"""mnmt-scaling: scaling-law studies of multilingual machine translation."""

from setuptools import find_packages, setup

# Versions are pinned in requirements/constraints.txt (install with `-c`); ranges here stay loose
# so the package also installs beside other pinned stacks.
FITTING_REQUIRES = ["numpy>=1.26", "scipy>=1.11", "pandas>=2.0", "matplotlib>=3.8"]
TRAINING_REQUIRES = [
    "jax>=0.4.30",
    "flax>=0.10",
    "optax>=0.2",
    "orbax-checkpoint>=0.6",
    "gin-config>=0.5",
    "seqio>=0.0.19",
    "tensorflow>=2.16",
    "tensorflow-text>=2.16",
    "tensorboard>=2.16",
    "sentencepiece>=0.2",
    "sacrebleu>=2.4",
    "pyarrow>=14",
    "apache-beam>=2.60",
    "grain>=0.2.12",
    "array-record>=0.5",
]

setup(
    name="mnmt-scaling",
    version="0.1.0",
    description="Scaling-law studies of multilingual machine translation: JAX/Flax training "
    "stack and a fitting package for the published laws.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["mnmt", "mnmt.*", "fitting", "fitting.*", "launch", "launch.*"]),
    package_data={"": ["*.gin"]},
    data_files=[],
    install_requires=FITTING_REQUIRES + TRAINING_REQUIRES,
    extras_require={
        # selenium: report.html in the system's headless Chromium (tests/test_report_figures.py);
        # nbclient, nbformat, ipykernel: docs/notebooks/analysis.ipynb run top to bottom
        # (tests/test_notebook.py); hypothesis: property-based fuzzing of inputs
        # (tests/test_fuzz.py); wandb: the offline W&B runs of tests/training/test_tracking.py;
        # pytest-xdist: the suite over one process per core (`pytest -n 2`, tests/conftest.py)
        "dev": ["pytest>=8", "pytest-xdist>=3.6", "ruff>=0.5", "selenium>=4.20", "nbclient>=0.10",
                "nbformat>=5.10", "ipykernel>=6.29", "hypothesis>=6.100", "wandb>=0.20"],
        # Weights & Biases logging beside TensorBoard (TrackingConfig.wandb_project).
        "tracking": ["wandb>=0.20"],
        # Peer libraries measured against in benchmarks/ (never imported by the package).
        "bench": ["chinchilla>=0.2", "psutil>=5", "torch>=2.13", "transformers>=5"],
        "tpu": ["jax[tpu]"],
        # CUDA 12 jax (plugins pinned with jax in requirements/constraints.txt); the PyTorch
        # baseline of benchmarks/speed/accelerator_step.py is in "bench".
        "gpu": ["jax[cuda12]"],
    },
    entry_points={
        "console_scripts": [
            "mnmt-train=mnmt.training.train:main",
            "mnmt-study=mnmt.study.cli:main",
            "mnmt-export=mnmt.export:main",
            "mnmt-translate=mnmt.training.translate:main",
            "mnmt-fit=fitting.cli:main",
            "mnmt-zoo=mnmt.models.zoo:main",
            "mnmt-vocab=mnmt.study.vocab_cli:main",
            "mnmt-cache=mnmt.data.cache.cli:main",
        ],
        # Further `mnmt-study` subcommands, found at run time (launch depends on mnmt, not back).
        "mnmt_study.commands": ["launch=launch.cli:register"],
    },
)
