package io.deltalog.write;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.internal.io.FileCommitProtocol.TaskCommitMessage;
import org.apache.spark.internal.io.FileNameSpec;
import org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol;

import scala.Option;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;

/**
 * Spark's Parquet writer without renames, for tables on object stores.
 *
 * A write that carries the option {@link #WRITE_ID} writes each file straight at its final key under
 * the output path (a fresh name per file, so retried and speculative attempts never share one) and
 * hands its path back to the driver in the task's commit message. The job's commit does nothing to the
 * store: it keeps the paths for the driver to {@link #take}, which reads their footers and commits
 * them to the Delta log. An object store has no rename (S3A would copy every byte, then delete), and
 * the driver never lists what executors wrote. Files of a failed attempt are deleted; files of a job
 * that fails are named by no Delta version, which VACUUM removes.
 *
 * Every other write of the session (no such option) is Spark's default protocol, unchanged.
 */
public class DirectCommitProtocol extends SQLHadoopMapReduceCommitProtocol {

  /** Lower case: Spark lowers option names on their way into the job's Hadoop configuration. */
  public static final String WRITE_ID = "deltalog.direct.write.id";

  private static final ConcurrentHashMap<String, List<String>> WRITTEN = new ConcurrentHashMap<>();

  private final String root;
  /** The files of one task attempt, relative to the root (set on the executor). */
  private ArrayList<String> taskFiles;

  public DirectCommitProtocol(String jobId, String path, boolean dynamicPartitionOverwrite) {
    super(jobId, path, dynamicPartitionOverwrite);
    this.root = path;
  }

  private static boolean direct(JobContext context) {
    return context.getConfiguration().get(WRITE_ID) != null;
  }

  /** The relative paths the write `writeId` committed, once; null when its job did not commit. */
  public static String[] take(String writeId) {
    List<String> files = WRITTEN.remove(writeId);
    return files == null ? null : files.toArray(new String[0]);
  }

  @Override
  public void setupJob(JobContext job) {
    if (!direct(job)) {
      super.setupJob(job);
    }
  }

  @Override
  public void setupTask(TaskAttemptContext task) {
    if (!direct(task)) {
      super.setupTask(task);
      return;
    }
    taskFiles = new ArrayList<>();
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext task, Option<String> dir, FileNameSpec spec) {
    if (!direct(task)) {
      return super.newTaskTempFile(task, dir, spec);
    }
    String name = spec.prefix()
        + String.format("part-%05d-%s", task.getTaskAttemptID().getTaskID().getId(), UUID.randomUUID())
        + spec.suffix();
    String relative = dir.isDefined() ? dir.get() + "/" + name : name;
    taskFiles.add(relative);
    Path base = dir.isDefined() ? new Path(new Path(root), dir.get()) : new Path(root);
    return new Path(base, name).toString();
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext task, Option<String> dir, String ext) {
    return newTaskTempFile(task, dir, new FileNameSpec("", ext));
  }

  @Override
  public TaskCommitMessage commitTask(TaskAttemptContext task) {
    if (!direct(task)) {
      return super.commitTask(task);
    }
    return new TaskCommitMessage(new ArrayList<>(taskFiles));
  }

  @Override
  public void abortTask(TaskAttemptContext task) {
    if (!direct(task)) {
      super.abortTask(task);
      return;
    }
    if (taskFiles == null) {
      return;
    }
    for (String relative : taskFiles) {
      Path file = new Path(new Path(root), relative);
      try {
        file.getFileSystem(task.getConfiguration()).delete(file, false);
      } catch (IOException ignored) {
        // named by no commit: VACUUM removes it later
      }
    }
  }

  @Override
  @SuppressWarnings("unchecked")
  public void commitJob(JobContext job, Seq<TaskCommitMessage> messages) {
    if (!direct(job)) {
      super.commitJob(job, messages);
      return;
    }
    List<String> files = new ArrayList<>();
    Iterator<TaskCommitMessage> it = messages.iterator();
    while (it.hasNext()) {
      files.addAll((List<String>) it.next().obj());
    }
    WRITTEN.put(job.getConfiguration().get(WRITE_ID), files);
  }

  @Override
  public void abortJob(JobContext job) {
    if (!direct(job)) {
      super.abortJob(job);
    }
  }
}
