# mhagen_add_attention(<target>
#     SPECS <file.mha>...                      # every spec of these files
#   | [OP layer|sdpa] D <d> H <h> [KV <kv>] [DK <dk>] [DV <dv>]
#     [MASK <expr>] [DTYPE f32|bf16|f16] [BIAS] [SCALE <s>|runtime]
#     [KV_DTYPE f32|bf16|f16|i8] [KV_CACHE contiguous|paged(<block>)]
#     [RAGGED] [LSE] [SOFTCAP <c>] [ALIBI true|runtime] [SINKS learned]
#     [NAME <name>] [T <T>] [TKV <Tkv>] [B <B>] # one spec from arguments
#   [TARGETS <target>...]                      # e.g. avx2 avx512 (default host)
#   [BACKEND halide|mlir] [TUNING_DB <file> [MACHINE_CLASS <class>]]
#   [BUNDLE <name>] [EMIT <ir>...])
#
# The arguments are the spec language's fields (docs/spec-language.md),
# one per field, with the meaning they have in a .mha file.
#
# TUNING_DB picks each spec's record measured on MACHINE_CLASS (as `mhagen
# tune --report` prints it; default: the machine that builds), else on the
# nearest class the database has, and says which at build time.
#
# Generates the kernels at build time with mhagen and links them, and the
# mhagen runtime, into <target>. The kernels' headers come through one
# header, <BUNDLE>.h (default mhagen_<target>_<n>.h), on the include path.
# Regenerates only when a spec file, the tuning database, the arguments or
# mhagen itself change.

# The spec fields mhagen_add_attention takes come from mhagen's field table
# (generated at build time by `mhagen help fields --cmake`):
# _MHAGEN_VALUE_FIELDS and _MHAGEN_OPTION_FIELDS, as ARGUMENT:spec_field:--flag.
# A value argument becomes `spec_field = value` of a one-spec file (NAME) or
# `--flag=value` of the command line; an option `spec_field = true`.
if(NOT MHAGEN_SPEC_FIELDS_FILE)
  set(MHAGEN_SPEC_FIELDS_FILE "${CMAKE_CURRENT_LIST_DIR}/MhagenSpecFields.cmake")
endif()
include("${MHAGEN_SPEC_FIELDS_FILE}")

function(mhagen_add_attention target)
  set(_values)
  foreach(_field IN LISTS _MHAGEN_VALUE_FIELDS)
    string(REGEX REPLACE ":.*" "" _key "${_field}")
    list(APPEND _values ${_key})
  endforeach()
  set(_options)
  foreach(_field IN LISTS _MHAGEN_OPTION_FIELDS)
    string(REGEX REPLACE ":.*" "" _key "${_field}")
    list(APPEND _options ${_key})
  endforeach()
  cmake_parse_arguments(MA "${_options}"
    "${_values};NAME;BACKEND;TUNING_DB;MACHINE_CLASS;BUNDLE"
    "SPECS;TARGETS;EMIT" ${ARGN})
  if(MA_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "mhagen_add_attention: unknown arguments ${MA_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "mhagen_add_attention: ${target} is not a target")
  endif()
  if(NOT MA_SPECS AND (NOT MA_D OR NOT MA_H))
    message(FATAL_ERROR
      "mhagen_add_attention(${target}): give SPECS <files> or at least D and H")
  endif()

  get_property(_count TARGET ${target} PROPERTY MHAGEN_ATTENTION_COUNT)
  if(NOT _count)
    set(_count 0)
  endif()
  math(EXPR _count "${_count} + 1")
  set_property(TARGET ${target} PROPERTY MHAGEN_ATTENTION_COUNT ${_count})
  if(NOT MA_BUNDLE)
    set(MA_BUNDLE "mhagen_${target}_${_count}")
  endif()
  set(_dir "${CMAKE_CURRENT_BINARY_DIR}/mhagen/${target}_${_count}")

  set(_args)
  set(_deps)
  if(MA_SPECS)
    foreach(_spec IN LISTS MA_SPECS)
      get_filename_component(_abs "${_spec}" ABSOLUTE)
      list(APPEND _args "${_abs}")
      list(APPEND _deps "${_abs}")
    endforeach()
  endif()
  # The spec from arguments, as flags and as a spec file's fields.
  set(_text "")
  foreach(_triple IN LISTS _MHAGEN_VALUE_FIELDS)
    string(REPLACE ":" ";" _triple "${_triple}")
    list(GET _triple 0 _key)
    list(GET _triple 1 _field)
    list(GET _triple 2 _flag)
    if(DEFINED MA_${_key})
      list(APPEND _args "${_flag}=${MA_${_key}}")
      string(APPEND _text "  ${_field} = ${MA_${_key}}\n")
    endif()
  endforeach()
  foreach(_triple IN LISTS _MHAGEN_OPTION_FIELDS)
    string(REPLACE ":" ";" _triple "${_triple}")
    list(GET _triple 0 _key)
    list(GET _triple 1 _field)
    list(GET _triple 2 _flag)
    if(MA_${_key})
      list(APPEND _args "${_flag}")
      string(APPEND _text "  ${_field} = true\n")
    endif()
  endforeach()
  if(DEFINED MA_BACKEND)
    list(APPEND _args --backend "${MA_BACKEND}")
  endif()
  if(MA_NAME)
    if(MA_SPECS)
      message(FATAL_ERROR "mhagen_add_attention: NAME goes with flags, not SPECS")
    endif()
    # A named spec from arguments: written as a one-spec file at configure
    # time.
    set(_file "${_dir}/${MA_NAME}.mha")
    set(_text "spec ${MA_NAME} {\n${_text}}\n")
    file(WRITE "${_file}.new" "${_text}")
    file(COPY_FILE "${_file}.new" "${_file}" ONLY_IF_DIFFERENT)
    set(_args "${_file}")
    if(DEFINED MA_BACKEND)
      list(APPEND _args --backend "${MA_BACKEND}")
    endif()
    set(_deps "${_file}")
  endif()
  if(MA_TARGETS)
    list(JOIN MA_TARGETS "," _targets)
    list(APPEND _args --targets "${_targets}")
  endif()
  if(MA_TUNING_DB)
    get_filename_component(_db "${MA_TUNING_DB}" ABSOLUTE)
    list(APPEND _args --db "${_db}")
    list(APPEND _deps "${_db}")
    if(MA_MACHINE_CLASS)
      list(APPEND _args --machine-class "${MA_MACHINE_CLASS}")
    endif()
  elseif(MA_MACHINE_CLASS)
    message(FATAL_ERROR "mhagen_add_attention: MACHINE_CLASS needs TUNING_DB")
  endif()
  if(MA_EMIT)
    list(JOIN MA_EMIT "," _emit)
    list(APPEND _args --emit "${_emit}")
  endif()

  set(_obj "${_dir}/${MA_BUNDLE}.o")
  set(_hdr "${_dir}/${MA_BUNDLE}.h")
  add_custom_command(
    OUTPUT "${_obj}" "${_hdr}"
    COMMAND ${CMAKE_COMMAND} -E make_directory "${_dir}"
    COMMAND mhagen::mhagen generate ${_args} -o "${_dir}"
            --bundle "${MA_BUNDLE}"
    DEPENDS $<TARGET_FILE:mhagen::mhagen> ${_deps}
    COMMENT "mhagen: generating attention kernels for ${target}"
    VERBATIM)
  set_source_files_properties("${_obj}" PROPERTIES
    EXTERNAL_OBJECT TRUE GENERATED TRUE)
  target_sources(${target} PRIVATE "${_obj}" "${_hdr}")
  target_include_directories(${target} PRIVATE "${_dir}")
  target_link_libraries(${target} PRIVATE mhagen::runtime)
endfunction()
