package io.deltalog.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system without a process per file.
 *
 * Without Hadoop's native library (pyspark ships none), RawLocalFileSystem sets the permissions of
 * every file and folder it creates by running the `chmod` program: three processes per Parquet file
 * Spark writes, about 10 ms each. Java's own POSIX call does the same in microseconds. Checksum
 * (.crc) files are not written either: data files are checked by Parquet, and Delta readers never
 * look at .crc files beside them.
 */
public class NoForkLocalFileSystem extends LocalFileSystem {

  public NoForkLocalFileSystem() {
    super(new Raw());
    setWriteChecksum(false);
  }

  /** RawLocalFileSystem whose setPermission is a system call, not a child process. */
  public static class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      Set<PosixFilePermission> modes = EnumSet.noneOf(PosixFilePermission.class);
      add(modes, permission.getUserAction(), PosixFilePermission.OWNER_READ,
          PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE);
      add(modes, permission.getGroupAction(), PosixFilePermission.GROUP_READ,
          PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE);
      add(modes, permission.getOtherAction(), PosixFilePermission.OTHERS_READ,
          PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE);
      Files.setPosixFilePermissions(pathToFile(p).toPath(), modes);
    }

    private static void add(Set<PosixFilePermission> modes, FsAction action, PosixFilePermission read,
                            PosixFilePermission write, PosixFilePermission execute) {
      if (action.implies(FsAction.READ)) modes.add(read);
      if (action.implies(FsAction.WRITE)) modes.add(write);
      if (action.implies(FsAction.EXECUTE)) modes.add(execute);
    }
  }
}
