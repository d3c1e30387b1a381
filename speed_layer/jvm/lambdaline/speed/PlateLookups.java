package lambdaline.speed;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

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
 * The speed layer's per-plate lookups: each entry's trip and its registration, in one
 * stateful operator keyed by licence plate (Spark's transformWithState, event time).
 *
 * <p>The rules are {@code shared.domain.views}' ({@code trip_matches}, {@code
 * registration_applies}, the candidates' ranks in {@code shared.domain.views.spec}), kept here in the form
 * plate state needs: a trip's candidate is an exit of the entry's booth in [entry, entry +
 * maxTrip], the earliest best; a registration's is one of the plate recorded in [entry -
 * lookback, entry], the greatest (time, id, event id) best. The equivalence, cross-layer and
 * generated tests hold the two layers to each other.
 *
 * <p>Input: one row per event ({@link #INPUT_COLUMNS}), {@code kind} entry, exit or
 * registration, {@code time_ms} its event time, under one watermark on {@code event_time}
 * (Spark drops rows at or before the previous micro-batch's watermark W before they reach
 * here). State per plate ({@link #STATE}): the entries of the last maxTrip (each with its best
 * exit and registration so far), the exits an entry to come can still use (after W), and the
 * registrations an entry to come can still use: the best one recorded at or before W (it
 * outranks every older one for any later entry) and those after W; one event-time timer, at
 * the plate's next deadline.
 *
 * <p>Output ({@link #OUTPUT}), append: a {@code trip} or {@code registration} candidate when an
 * event makes one better than what the entry had (no fan-out: an entry's candidates improve
 * strictly); {@code missing_registration} once W passes the entry with none, {@code
 * missing_exit} once W passes entry + maxTrip with none, when the entry leaves the state.
 */
public final class PlateLookups extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;

  public static final String ENTRY = "entry", EXIT = "exit", REGISTRATION = "registration";
  public static final String TRIP = "trip", MISSING_EXIT = "missing_exit";
  public static final String MISSING_REGISTRATION = "missing_registration";

  /** The columns read of each input row (others are ignored). */
  public static final String[] INPUT_COLUMNS = {
    "kind", "license_plate", "time_ms", "event_id", "booth_id", "registration_id", "expired"
  };

  public static final StructType OUTPUT =
      new StructType()
          .add("kind", DataTypes.StringType, false)
          .add("event_id", DataTypes.StringType)
          .add("booth_id", DataTypes.StringType)
          .add("license_plate", DataTypes.StringType)
          .add("entry_ms", DataTypes.LongType)
          .add("exit_ms", DataTypes.LongType)
          .add("registration_ms", DataTypes.LongType)
          .add("registration_id", DataTypes.StringType)
          .add("registration_event_id", DataTypes.StringType)
          .add("expired", DataTypes.BooleanType);

  private static final StructType REGISTRATION_STATE =
      new StructType()
          .add("ms", DataTypes.LongType, false)
          .add("id", DataTypes.StringType)
          .add("event_id", DataTypes.StringType)
          .add("expired", DataTypes.BooleanType);

  private static final StructType ENTRY_STATE =
      new StructType()
          .add("event_id", DataTypes.StringType)
          .add("booth_id", DataTypes.StringType)
          .add("ms", DataTypes.LongType, false)
          .add("exit_ms", DataTypes.LongType)
          .add("registration", REGISTRATION_STATE)
          .add("registration_decided", DataTypes.BooleanType, false);

  private static final StructType EXIT_STATE =
      new StructType()
          .add("booth_id", DataTypes.StringType)
          .add("ms", DataTypes.LongType, false);

  public static final StructType STATE =
      new StructType()
          .add("entries", DataTypes.createArrayType(ENTRY_STATE, false))
          .add("exits", DataTypes.createArrayType(EXIT_STATE, false))
          .add("registrations", DataTypes.createArrayType(REGISTRATION_STATE, false))
          .add("timer_ms", DataTypes.LongType);

  private final long maxTripMs;
  private final long lookbackMs;
  private transient ValueState<Row> plates;

  private PlateLookups(long maxTripMs, long lookbackMs) {
    this.maxTripMs = maxTripMs;
    this.lookbackMs = lookbackMs;
  }

  /** The lookups of a stream of plate events ({@link #INPUT_COLUMNS}), as {@link #OUTPUT} rows. */
  public static Dataset<Row> apply(Dataset<Row> events, long maxTripMs, long lookbackMs) {
    PlateLookups lookups = new PlateLookups(maxTripMs, lookbackMs);
    return Lanes.keyed(events, "license_plate", lookups, OutputMode.Append(), OUTPUT);
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    plates = getHandle().getValueState("plate", Encoders.row(STATE), TTLConfig.NONE());
  }

  @Override
  public Iterator<Row> handleInputRows(String plate, Iterator<Row> rows, TimerValues timers) {
    Plate state = Plate.of(plates.exists() ? plates.get() : null);
    List<Entry> arrived = new ArrayList<>();
    while (rows.hasNext()) {
      Row row = rows.next();
      String kind = row.getString(row.fieldIndex("kind"));
      long ms = row.getLong(row.fieldIndex("time_ms"));
      String eventId = row.getString(row.fieldIndex("event_id"));
      switch (kind) {
        case ENTRY -> {
          Entry entry = new Entry(eventId, row.getString(row.fieldIndex("booth_id")), ms);
          if (state.add(entry)) {
            arrived.add(entry);
          }
        }
        case EXIT -> state.add(new Exit(row.getString(row.fieldIndex("booth_id")), ms));
        case REGISTRATION -> {
          int expired = row.fieldIndex("expired");
          state.add(
              new Registration(
                  ms,
                  row.getString(row.fieldIndex("registration_id")),
                  eventId,
                  row.isNullAt(expired) ? null : row.getBoolean(expired)));
        }
        default -> throw new IllegalArgumentException("unknown plate event kind " + kind);
      }
    }
    List<Row> out = new ArrayList<>();
    for (Entry entry : state.entries) {
      Exit exit = state.earliestExit(entry, maxTripMs);
      if (exit != null && (entry.exitMs == null || exit.ms < entry.exitMs)) {
        entry.exitMs = exit.ms;
        out.add(tripRow(plate, entry));
      }
      if (!entry.registrationDecided) {
        Registration best = state.bestRegistration(entry, lookbackMs);
        if (best != null && (entry.registration == null || best.outranks(entry.registration))) {
          entry.registration = best;
          out.add(registrationRow(plate, entry));
        }
      }
    }
    state.forget(timers.getCurrentWatermarkInMs(), lookbackMs);
    save(state);
    return CollectionConverters.asScala(out.iterator());
  }

  @Override
  public Iterator<Row> handleExpiredTimer(
      String plate, TimerValues timers, ExpiredTimerInfo fired) {
    if (!plates.exists()) {
      return CollectionConverters.asScala(java.util.Collections.<Row>emptyIterator());
    }
    Plate state = Plate.of(plates.get());
    state.timerMs = null; // a fired timer is gone
    long watermark = timers.getCurrentWatermarkInMs();
    List<Row> out = new ArrayList<>();
    List<Entry> kept = new ArrayList<>();
    for (Entry entry : state.entries) {
      // no registration recorded at or before the entry can arrive once W >= entry
      if (!entry.registrationDecided && watermark >= entry.ms) {
        entry.registrationDecided = true;
        if (entry.registration == null) {
          out.add(diagnosticRow(MISSING_REGISTRATION, plate, entry));
        }
      }
      // nor an exit within maxTrip of it once W >= entry + maxTrip
      if (watermark >= entry.ms + maxTripMs) {
        if (entry.exitMs == null) {
          out.add(diagnosticRow(MISSING_EXIT, plate, entry));
        }
      } else {
        kept.add(entry);
      }
    }
    state.entries = kept;
    state.forget(watermark, lookbackMs);
    save(state);
    return CollectionConverters.asScala(out.iterator());
  }

  /** Keep the plate's state, or drop it when empty; one timer, at its next deadline. */
  private void save(Plate state) {
    Long next = state.nextDeadline(maxTripMs, lookbackMs);
    state.timerMs = Lanes.moveTimer(getHandle(), state.timerMs, next);
    if (state.isEmpty()) {
      plates.clear();
    } else {
      plates.update(state.toRow());
    }
  }

  private static Row tripRow(String plate, Entry entry) {
    return RowFactory.create(
        TRIP, entry.eventId, entry.boothId, plate, entry.ms, entry.exitMs,
        null, null, null, null);
  }

  private static Row registrationRow(String plate, Entry entry) {
    Registration r = entry.registration;
    return RowFactory.create(
        REGISTRATION, entry.eventId, entry.boothId, plate, entry.ms, null,
        r.ms, r.id, r.eventId, r.expired);
  }

  private static Row diagnosticRow(String kind, String plate, Entry entry) {
    return RowFactory.create(
        kind, entry.eventId, entry.boothId, plate, entry.ms, null, null, null, null, null);
  }

  /** An entry held for its lookups. */
  static final class Entry {
    final String eventId;
    final String boothId;
    final long ms;
    Long exitMs;
    Registration registration;
    boolean registrationDecided;

    Entry(String eventId, String boothId, long ms) {
      this.eventId = eventId;
      this.boothId = boothId;
      this.ms = ms;
    }
  }

  record Exit(String boothId, long ms) {}

  /** A registration; ranked by (time, id, event id), greatest best (nulls first). */
  record Registration(long ms, String id, String eventId, Boolean expired) {
    static final Comparator<Registration> RANK =
        Comparator.comparingLong(Registration::ms)
            .thenComparing(Registration::id, Comparator.nullsFirst(Comparator.naturalOrder()))
            .thenComparing(Registration::eventId, Comparator.nullsFirst(Comparator.naturalOrder()));

    boolean outranks(Registration other) {
      return RANK.compare(this, other) > 0;
    }

    /** {@code shared.domain.views.expired_registrations.registration_applies}. */
    boolean appliesTo(long entryMs, long lookbackMs) {
      return ms <= entryMs && ms + lookbackMs >= entryMs;
    }

    Row toRow() {
      return RowFactory.create(ms, id, eventId, expired);
    }

    static Registration of(Row row) {
      return row == null
          ? null
          : new Registration(
              row.getLong(0), row.getString(1), row.getString(2),
              row.isNullAt(3) ? null : row.getBoolean(3));
    }
  }

  /** One plate's state. */
  static final class Plate {
    List<Entry> entries = new ArrayList<>();
    List<Exit> exits = new ArrayList<>();
    List<Registration> registrations = new ArrayList<>();
    Long timerMs;

    static Plate of(Row row) {
      Plate plate = new Plate();
      if (row == null) {
        return plate;
      }
      for (Row e : row.<Row>getList(0)) {
        Entry entry = new Entry(e.getString(0), e.getString(1), e.getLong(2));
        entry.exitMs = e.isNullAt(3) ? null : e.getLong(3);
        entry.registration = Registration.of(e.isNullAt(4) ? null : e.getStruct(4));
        entry.registrationDecided = e.getBoolean(5);
        plate.entries.add(entry);
      }
      for (Row x : row.<Row>getList(1)) {
        plate.exits.add(new Exit(x.getString(0), x.getLong(1)));
      }
      for (Row r : row.<Row>getList(2)) {
        plate.registrations.add(Registration.of(r));
      }
      plate.timerMs = row.isNullAt(3) ? null : row.getLong(3);
      return plate;
    }

    Row toRow() {
      List<Row> entryRows = new ArrayList<>(entries.size());
      for (Entry e : entries) {
        entryRows.add(
            RowFactory.create(
                e.eventId, e.boothId, e.ms, e.exitMs,
                e.registration == null ? null : e.registration.toRow(),
                e.registrationDecided));
      }
      List<Row> exitRows = new ArrayList<>(exits.size());
      for (Exit x : exits) {
        exitRows.add(RowFactory.create(x.boothId(), x.ms()));
      }
      List<Row> registrationRows = new ArrayList<>(registrations.size());
      for (Registration r : registrations) {
        registrationRows.add(r.toRow());
      }
      return RowFactory.create(
          seq(entryRows), seq(exitRows), seq(registrationRows), timerMs);
    }

    private static scala.collection.immutable.Seq<Row> seq(List<Row> rows) {
      return CollectionConverters.asScala(rows).toSeq();
    }

    boolean isEmpty() {
      return entries.isEmpty() && exits.isEmpty() && registrations.isEmpty();
    }

    /** Adds an entry not held yet (a copy of one, same event id, is not); true if added. */
    boolean add(Entry entry) {
      for (Entry held : entries) {
        if (held.eventId.equals(entry.eventId)) {
          return false;
        }
      }
      entries.add(entry);
      return true;
    }

    void add(Exit exit) {
      if (!exits.contains(exit)) { // a copy cannot change an earliest exit
        exits.add(exit);
      }
    }

    void add(Registration registration) {
      if (!registrations.contains(registration)) {
        registrations.add(registration);
      }
    }

    /** {@code shared.domain.views.vehicle_trips.trip_matches}: its booth, in [entry, entry + maxTrip]. */
    Exit earliestExit(Entry entry, long maxTripMs) {
      Exit best = null;
      for (Exit exit : exits) {
        if (exit.boothId().equals(entry.boothId)
            && exit.ms() >= entry.ms
            && exit.ms() <= entry.ms + maxTripMs
            && (best == null || exit.ms() < best.ms())) {
          best = exit;
        }
      }
      return best;
    }

    Registration bestRegistration(Entry entry, long lookbackMs) {
      Registration best = null;
      for (Registration r : registrations) {
        if (r.appliesTo(entry.ms, lookbackMs) && (best == null || r.outranks(best))) {
          best = r;
        }
      }
      return best;
    }

    /**
     * Drops what no event after the watermark can use: exits at or before it (an entry to come
     * is later), registrations outranked by one recorded at or before it, and registrations
     * older than the lookback.
     */
    void forget(long watermark, long lookbackMs) {
      exits.removeIf(exit -> exit.ms() <= watermark);
      Registration base = null;
      for (Registration r : registrations) {
        if (r.ms() <= watermark && (base == null || r.outranks(base))) {
          base = r;
        }
      }
      final Registration kept = base;
      registrations.removeIf(
          r -> (r.ms() <= watermark && r != kept) || r.ms() + lookbackMs <= watermark);
    }

    /** When the state next changes with the watermark alone. */
    Long nextDeadline(long maxTripMs, long lookbackMs) {
      long next = Long.MAX_VALUE;
      for (Entry entry : entries) {
        next = Math.min(next, entry.registrationDecided ? entry.ms + maxTripMs : entry.ms);
      }
      for (Exit exit : exits) {
        next = Math.min(next, exit.ms());
      }
      for (Registration r : registrations) {
        next = Math.min(next, r.ms() + lookbackMs);
      }
      return next == Long.MAX_VALUE ? null : next;
    }
  }
}
