"""The code that runs inside the sandbox, and nothing else: this folder is bound read-only at /opt/veriloop in every
bubblewrap sandbox and Docker container (and put first on the path of a plain process), so a job can read these
files but no host code. Standard library only: the modules run under the image's python3 as well as the host's.

`runner.py` is the job runner (one job, or a warm zygote and supervisor); `harness_py.py` is the Python test judge
it imports for judged steps. The host imports them too, as `veriloop.sandbox.inside.*` (test counting, seccomp)."""
