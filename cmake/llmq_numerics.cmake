# The floating-point flags of single sources, stated once for both CMake trees that compile them:
# the main build (kernels/, engine/) and the GPU-only build (scripts/gpu). Each tree calls
# llmq_numerics_flags() on its targets after setting its own per-source options.

# llmq_numerics_flags(<target>...): appends, in each target's directory, the flag of every rule
# below whose source the target compiles. Appends (call it after any set_source_files_properties
# of the same sources, which would replace the flags).
function(llmq_numerics_flags)
  cmake_path(GET CMAKE_CURRENT_FUNCTION_LIST_DIR PARENT_PATH root)
  # Rules: a source (from the repository root), then its flag.
  set(rules
    # Exp (kernels/cpu/vec_math.h) clamps with min/max: those selects, and so the SiLU loop over Exp,
    # only vectorize when the compiler may assume that floating-point exceptions are not observed;
    # every lane computes what the scalar code computes (the same bits with or without the flag).
    kernels/cpu/ops.cpp -fno-trapping-math
    # The log-sum-exp's selects (NaN, -inf), likewise: vectorized, the same bits.
    engine/sampling/logprobs.cpp -fno-trapping-math
    # Attention writes every fused multiply-add out (attention.h's arithmetic, the same on every
    # ISA and in the scalar kernel): the compiler must not fuse the rest. This flag changes bits.
    kernels/cpu/attention.cpp -ffp-contract=off
    kernels/cpu/attention_avx512.cpp -ffp-contract=off)
  foreach(target IN LISTS ARGN)
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(srcs ${target} SOURCES)
    set(compiled "")
    foreach(src IN LISTS srcs)
      cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY "${dir}" NORMALIZE)
      list(APPEND compiled "${src}")
    endforeach()
    list(LENGTH rules n)
    math(EXPR last "${n} - 1")
    foreach(i RANGE 0 ${last} 2)
      math(EXPR j "${i} + 1")
      list(GET rules ${i} file)
      list(GET rules ${j} flag)
      if("${root}/${file}" IN_LIST compiled)
        set_property(SOURCE "${root}/${file}" TARGET_DIRECTORY ${target} APPEND PROPERTY
          COMPILE_OPTIONS ${flag})
      endif()
    endforeach()
  endforeach()
endfunction()
