# Run in llama-cpp-python's unpacked source before it is built. Its CMakeLists forces llama.cpp's
# `common` library on, which only the multimodal library (switched off) uses: skip compiling it.
set -e
grep -q 'set(LLAMA_BUILD_COMMON ON CACHE BOOL "Build llama.cpp common library" FORCE)' CMakeLists.txt
sed -i 's/set(LLAMA_BUILD_COMMON ON CACHE BOOL "Build llama.cpp common library" FORCE)/set(LLAMA_BUILD_COMMON OFF CACHE BOOL "Build llama.cpp common library" FORCE)/' CMakeLists.txt
