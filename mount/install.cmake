# `cmake --install` runs this (see the install() rules at the end of the top
# CMakeLists.txt) to put the mount helper and the systemd unit in place. Both
# name the installed daemon by its absolute path, and the helper's folder
# depends on the prefix, so they are written at install time, when --prefix
# is known; DESTDIR is honoured as by every install() rule.
#
# In: JOADERFS_SOURCE_DIR, JOADERFS_STAGE_DIR (a scratch folder in the build
# tree), JOADERFS_BINDIR (relative to the prefix), JOADERFS_MOUNT_HELPER_DIR
# (empty: /sbin for the prefixes /usr and /usr/local, else <prefix>/sbin).

cmake_path(SET prefix NORMALIZE "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "(.)/$" "\\1" prefix "${prefix}")
set(JOADERFS_BINARY "${prefix}/${JOADERFS_BINDIR}/joaderfs")

# mount(8) runs /sbin/mount.TYPE (util-linux looks in /sbin only; on a
# merged-/usr system that is /usr/sbin). A private prefix keeps them inside.
if(JOADERFS_MOUNT_HELPER_DIR)
  set(helper_dir "${JOADERFS_MOUNT_HELPER_DIR}")
elseif(prefix STREQUAL "/usr" OR prefix STREQUAL "/usr/local")
  set(helper_dir "/sbin")
else()
  set(helper_dir "${prefix}/sbin")
endif()

# One staging folder per destination: installs into other prefixes (the
# tests make some) may run at the same time.
string(SHA1 destination "$ENV{DESTDIR}|${prefix}|${helper_dir}")
set(stage "${JOADERFS_STAGE_DIR}/${destination}")
file(MAKE_DIRECTORY "${stage}")
foreach(template IN ITEMS mount.joaderfs joaderfs@.service.in)
  file(READ "${JOADERFS_SOURCE_DIR}/mount/${template}" text)
  string(CONFIGURE "${text}" text @ONLY)
  string(REGEX REPLACE "\\.in$" "" name "${template}")
  file(WRITE "${stage}/${name}" "${text}")
endforeach()
# `mount -t fuse.joaderfs` runs mount.fuse.joaderfs before falling back to
# mount.fuse3: the same helper, so the type works whatever the shell's PATH.
file(CREATE_LINK mount.joaderfs "${stage}/mount.fuse.joaderfs" SYMBOLIC)

file(INSTALL "${stage}/mount.joaderfs" "${stage}/mount.fuse.joaderfs"
     DESTINATION "${helper_dir}"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                      WORLD_READ WORLD_EXECUTE)
# systemd reads units from /usr/local/lib/systemd/system and /usr/lib/...
file(INSTALL "${stage}/joaderfs@.service" DESTINATION "${prefix}/lib/systemd/system")
