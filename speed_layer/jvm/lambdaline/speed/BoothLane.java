package lambdaline.speed;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The speed layer's booth lane: booth_stats and booth_rolling of each booth from one stateful
 * operator keyed by booth (Spark's transformWithState, event time).
 *
 * <p>A booth's entries are counted into buckets of {@code gcd(window, slide)}, aligned to the
 * epoch as Spark's windows are; a booth_stats row is the sum of its window's buckets, a
 * booth_rolling row the sum of its hopping window's ({@code shared.domain.views.booth_stats},
 * {@code booth_rolling}: counts and tolls add up). A micro-batch writes the rows of every window
 * its entries changed (update mode, as the aggregations it replaces did). A bucket is kept while
 * an entry still to come (after the watermark W) can change a window holding it; one event-time
 * timer per booth, at its oldest bucket's deadline, drops what W has passed.
 *
 * <p>Input ({@link #INPUT_COLUMNS}): one row per entry, duplicates dropped before it, the toll in
 * cents. Output ({@link #OUTPUT}): {@code kind} {@code booth_stats} or {@code booth_rolling}, the
 * window, its count and toll in cents, and (booth_stats) its first and last entry.
 */
public final class BoothLane extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  public static final String STATS = "booth_stats", ROLLING = "booth_rolling";

  public static final String[] INPUT_COLUMNS = {"booth_id", "time_ms", "toll_cents"};

  public static final StructType OUTPUT =
      new StructType()
          .add("kind", DataTypes.StringType, false)
          .add("booth_id", DataTypes.StringType, false)
          .add("window_start_ms", DataTypes.LongType, false)
          .add("window_end_ms", DataTypes.LongType, false)
          .add("vehicle_count", DataTypes.LongType, false)
          .add("toll_cents", DataTypes.LongType, false)
          .add("first_ms", DataTypes.LongType)
          .add("last_ms", DataTypes.LongType);

  private static final StructType BUCKET =
      new StructType()
          .add("start", DataTypes.LongType, false)
          .add("count", DataTypes.LongType, false)
          .add("cents", DataTypes.LongType, false)
          .add("first", DataTypes.LongType, false)
          .add("last", DataTypes.LongType, false);

  public static final StructType STATE =
      new StructType()
          .add("buckets", DataTypes.createArrayType(BUCKET, false))
          .add("timer_ms", DataTypes.LongType);

  private final long windowMs;
  private final long rollingMs;
  private final long slideMs;
  private final long bucketMs;
  private transient ValueState<Row> booths;

  private BoothLane(long windowMs, long rollingMs, long slideMs) {
    this.windowMs = windowMs;
    this.rollingMs = rollingMs;
    this.slideMs = slideMs;
    this.bucketMs = gcd(windowMs, slideMs);
  }

  private static long gcd(long a, long b) {
    return b == 0 ? a : gcd(b, a % b);
  }

  /** Booth_stats and booth_rolling rows of a stream of entries ({@link #INPUT_COLUMNS}). */
  public static Dataset<Row> apply(
      Dataset<Row> entries, long windowMs, long rollingMs, long slideMs) {
    BoothLane lane = new BoothLane(windowMs, rollingMs, slideMs);
    return Lanes.keyed(entries, "booth_id", lane, OutputMode.Update(), OUTPUT);
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    booths = getHandle().getValueState("booth", Encoders.row(STATE), TTLConfig.NONE());
  }

  /** Floor of {@code t} to a multiple of {@code step} (times before 1970 too). */
  private static long floor(long t, long step) {
    return Math.floorDiv(t, step) * step;
  }

  @Override
  public Iterator<Row> handleInputRows(String booth, Iterator<Row> rows, TimerValues timers) {
    Booth state = Booth.of(booths.exists() ? booths.get() : null);
    TreeSet<Long> statsWindows = new TreeSet<>();
    TreeSet<Long> rollingWindows = new TreeSet<>();
    while (rows.hasNext()) {
      Row row = rows.next();
      long t = row.getLong(row.fieldIndex("time_ms"));
      long cents = row.getLong(row.fieldIndex("toll_cents"));
      state.add(floor(t, bucketMs), t, cents);
      statsWindows.add(floor(t, windowMs));
      // the hopping windows holding t: starts in (t - rolling, t], multiples of the slide
      for (long s = floor(t, slideMs); s > t - rollingMs; s -= slideMs) {
        rollingWindows.add(s);
      }
    }
    List<Row> out = new ArrayList<>();
    for (long w : statsWindows) {
      out.add(state.sum(STATS, booth, w, w + windowMs, true));
    }
    for (long s : rollingWindows) {
      out.add(state.sum(ROLLING, booth, s, s + rollingMs, false));
    }
    state.forget(timers.getCurrentWatermarkInMs(), this);
    save(state);
    return CollectionConverters.asScala(out.iterator());
  }

  @Override
  public Iterator<Row> handleExpiredTimer(
      String booth, TimerValues timers, ExpiredTimerInfo fired) {
    if (booths.exists()) {
      Booth state = Booth.of(booths.get());
      state.timerMs = null; // a fired timer is gone
      state.forget(timers.getCurrentWatermarkInMs(), this);
      save(state);
    }
    return CollectionConverters.asScala(java.util.Collections.<Row>emptyIterator());
  }

  /**
   * The watermark at which a bucket can no longer change a window: the end of the latest
   * window holding it (its booth_stats window, or the latest hopping window that starts at or
   * before it).
   */
  long deadline(long bucketStart) {
    return Math.max(
        floor(bucketStart, windowMs) + windowMs, floor(bucketStart, slideMs) + rollingMs);
  }

  private void save(Booth state) {
    Long next = state.buckets.isEmpty() ? null : deadline(state.buckets.firstKey());
    state.timerMs = Lanes.moveTimer(getHandle(), state.timerMs, next);
    if (state.buckets.isEmpty()) {
      booths.clear();
    } else {
      booths.update(state.toRow());
    }
  }

  /** Entries of one bucket of time. */
  static final class Bucket {
    long count;
    long cents;
    long first = Long.MAX_VALUE;
    long last = Long.MIN_VALUE;
  }

  /** One booth's buckets, by start. */
  static final class Booth {
    final TreeMap<Long, Bucket> buckets = new TreeMap<>();
    Long timerMs;

    static Booth of(Row row) {
      Booth booth = new Booth();
      if (row == null) {
        return booth;
      }
      for (Row b : row.<Row>getList(0)) {
        Bucket bucket = new Bucket();
        bucket.count = b.getLong(1);
        bucket.cents = b.getLong(2);
        bucket.first = b.getLong(3);
        bucket.last = b.getLong(4);
        booth.buckets.put(b.getLong(0), bucket);
      }
      booth.timerMs = row.isNullAt(1) ? null : row.getLong(1);
      return booth;
    }

    Row toRow() {
      List<Row> rows = new ArrayList<>(buckets.size());
      for (Map.Entry<Long, Bucket> e : buckets.entrySet()) {
        Bucket b = e.getValue();
        rows.add(RowFactory.create(e.getKey(), b.count, b.cents, b.first, b.last));
      }
      return RowFactory.create(CollectionConverters.asScala(rows).toSeq(), timerMs);
    }

    void add(long bucketStart, long t, long cents) {
      Bucket bucket = buckets.computeIfAbsent(bucketStart, start -> new Bucket());
      bucket.count += 1;
      bucket.cents += cents;
      bucket.first = Math.min(bucket.first, t);
      bucket.last = Math.max(bucket.last, t);
    }

    /** The window [start, end)'s row: the sum of its buckets. */
    Row sum(String kind, String booth, long start, long end, boolean withTimes) {
      long count = 0, cents = 0, first = Long.MAX_VALUE, last = Long.MIN_VALUE;
      for (Bucket b : buckets.subMap(start, true, end, false).values()) {
        count += b.count;
        cents += b.cents;
        first = Math.min(first, b.first);
        last = Math.max(last, b.last);
      }
      return RowFactory.create(
          kind, booth, start, end, count, cents,
          withTimes ? first : null, withTimes ? last : null);
    }

    /** Drops the buckets no entry after the watermark can add to a window with. */
    void forget(long watermark, BoothLane lane) {
      buckets.entrySet().removeIf(e -> lane.deadline(e.getKey()) <= watermark);
    }
  }
}
