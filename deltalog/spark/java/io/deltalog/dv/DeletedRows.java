package io.deltalog.dv;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.HashMap;

import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.roaringbitmap.RoaringBitmap;

/**
 * Whether a row, given as its file (`_metadata.file_path`, the URI Spark spells) and its position in
 * that file (`_metadata.row_index`), is one the file's deletion vector deletes.
 *
 * <p>The deletion vectors come as one blob: per file, the big-endian int length of its key, the key
 * (UTF-8: the local path for `file:` tables, else the decoded URI), the int length of a portable
 * 32-bit Roaring bitmap, and the bitmap. The rows of one file arrive together, so the file is looked up
 * (its URI decoded) once per run of rows, not once per row, as an anti-join on the path would.
 */
public final class DeletedRows implements UDF2<String, Long, Boolean> {
  private static final long serialVersionUID = 1L;
  private final byte[] blob;
  private transient HashMap<String, RoaringBitmap> byFile;
  private transient String lastPath;
  private transient RoaringBitmap last;

  public DeletedRows(byte[] blob) {
    this.blob = blob.clone();
  }

  /**
   * This UDF as a Spark function marked nondeterministic, so that the optimizer leaves it where the
   * query puts it (say after a join that keeps few rows) instead of pushing it down to the scan.
   */
  public UserDefinedFunction nondeterministic() {
    return functions.udf(this, DataTypes.BooleanType).asNondeterministic();
  }

  @Override
  public Boolean call(String path, Long row) {
    if (path == null || row == null) return false;
    if (!path.equals(lastPath)) {
      if (byFile == null) byFile = parse(blob);
      last = byFile.get(key(path));
      lastPath = path;
    }
    return last != null && row >= 0 && row <= 0xffffffffL && last.contains((int) (long) row);
  }

  /** The blob's key for a Spark file path: a `file:` URI's decoded, normalized path, else the decoded URI. */
  static String key(String sparkPath) {
    try {
      URI uri = new URI(sparkPath);
      String scheme = uri.getScheme();
      if (scheme == null || scheme.equals("file")) return Paths.get(uri.getPath()).normalize().toString();
      return scheme + ":" + uri.getSchemeSpecificPart();
    } catch (URISyntaxException | IllegalArgumentException e) {
      return sparkPath;
    }
  }

  static HashMap<String, RoaringBitmap> parse(byte[] blob) {
    ByteBuffer in = ByteBuffer.wrap(blob);
    HashMap<String, RoaringBitmap> out = new HashMap<>();
    while (in.hasRemaining()) {
      byte[] key = new byte[in.getInt()];
      in.get(key);
      out.put(new String(key, StandardCharsets.UTF_8), readBitmap(in));
    }
    return out;
  }

  /**
   * The blobs' bitmap entry at `in`'s position: the int length of a portable 32-bit Roaring bitmap (0:
   * none, an empty bitmap) and the bitmap; `in` is left after it.
   */
  static RoaringBitmap readBitmap(ByteBuffer in) {
    int length = in.getInt();
    RoaringBitmap rows = new RoaringBitmap();
    if (length > 0) {
      ByteBuffer bitmap = in.slice();
      bitmap.limit(length);
      try {
        rows.deserialize(bitmap);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      in.position(in.position() + length);
    }
    return rows;
  }
}
